"""The device model catalog's look-up by name (``accelnet.fabric.catalog``)."""

from __future__ import annotations

from accelnet.fabric.catalog import _fold, device_models, find_device_model


def test_every_name_and_alias_finds_what_its_folded_form_finds() -> None:
    """A name as written (the fast index) and any case or spacing of it find one model."""
    for model in device_models():
        for name in (model.name, *model.aliases):
            found = find_device_model(name)
            assert found is not None
            for variant in (name.lower(), name.upper(), f"  {name.replace('-', ' ')} "):
                assert find_device_model(variant) is found, variant
            assert find_device_model(_fold(name)) is found
    assert find_device_model("tesla v100") is find_device_model("V100")
    assert find_device_model("no-such-gpu") is None
