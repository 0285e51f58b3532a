"""Hostile and odd fabric files fail cleanly, fast, and change nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from accelnet.fabric import FabricSpecError, Level, NoRouteError, device_model, load_fabric_file
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.fabric.presets import preset_names, preset_spec
from accelnet.fabric.spec import fabric_json_schema


def fails(tmp_path: Path, text: str, name: str = "f.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(FabricSpecError) as info:
        load_fabric_file(p)
    return str(info.value)


def build(spec: dict[str, object]):  # type: ignore[no-untyped-def]
    return build_fabric(parse_spec(spec, "<test>"))


def test_small_aliases_are_fine_and_errors_stay_short(tmp_path: Path) -> None:
    text = "defs: &d [1, 2, 3]\nname: *d\nhosts: [{name: h, devices: T4}]\n"
    msg = fails(tmp_path, text)
    assert "name = [1, 2, 3]: Input should be a valid string" in msg


def test_complex_yaml_key(tmp_path: Path) -> None:
    assert "a key must be a plain value" in fails(tmp_path, "? [a, b]\n: 1\nname: x\n")


def test_deep_nesting(tmp_path: Path) -> None:
    assert "nested too deeply" in fails(tmp_path, "name: x\nhosts: " + "[" * 5000 + "]" * 5000)
    assert "nested too deeply" in fails(tmp_path, "[" * 100_000 + "]" * 100_000, "f.json")


def test_file_larger_than_its_stat_says() -> None:
    with pytest.raises(FabricSpecError, match="larger than 16 MiB"):
        load_fabric_file("/dev/zero")


def test_alias_bomb_is_reported_quickly(tmp_path: Path) -> None:
    lines = ["defs:", "  a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append("name: *a8")
    start = time.monotonic()
    msg = fails(tmp_path, "\n".join(lines) + "\n")
    assert time.monotonic() - start < 10
    assert "expands to more than 2,000,000 values (YAML aliases?)" in msg and len(msg) < 2000


@pytest.mark.parametrize("width", ["10000000000", "1000000000000000", "99999999999999999999"])
def test_name_template_width_is_bounded(tmp_path: Path, width: str) -> None:
    msg = fails(tmp_path, f'name: x\nhosts:\n  - {{name: "n{{i:{width}d}}", devices: H100}}\n')
    assert "use one {i} or {i:03d}" in msg


def test_total_size_is_bounded(tmp_path: Path) -> None:
    text = (
        "name: x\nhosts: [{name: n, count: 131072, "
        "devices: [{model: H100, count: 1024}, {model: H100, count: 1024}]}]\n"
    )
    assert "past 1,048,576 devices" in fails(tmp_path, text)


def test_infinity_is_not_a_bandwidth(tmp_path: Path) -> None:
    text = (
        "name: x\nhosts:\n  - name: h\n    devices: 2xT4\n"
        "    links: [{a: gpu0, b: gpu1, medium: pcie, bandwidth_gbps: .inf, latency_us: 1}]\n"
    )
    assert "bandwidth_gbps = inf: Input should be a finite number" in fails(tmp_path, text)


def test_duplicate_json_keys(tmp_path: Path) -> None:
    text = '{"name": "a", "name": "b", "hosts": [{"name": "h", "devices": "T4"}]}'
    assert "duplicate key 'name'" in fails(tmp_path, text, "f.json")


@pytest.mark.parametrize(
    ("key", "value", "medium"),
    [("pcie_type", "IB-NDR", "infiniband"), ("smp_type", "WiFi6", "wifi"),
     ("nvlink_type", "PCIe4x16", "pcie")],
)  # fmt: skip
def test_link_types_must_fit_their_role(tmp_path: Path, key: str, value: str, medium: str) -> None:
    msg = fails(tmp_path, f"name: x\nhosts:\n  - {{name: h, devices: 2xL4, {key}: {value}}}\n")
    assert f"{key} = '{value}' is a {medium} link" in msg


def test_nvswitch_joins_only_devices_with_nvlink() -> None:
    spec = {"name": "x", "hosts": [{"name": "h", "nvlink": "nvswitch",
            "devices": ["4xH100-SXM", "2xL4", "1xAlveo-U250"]}]}  # fmt: skip
    fabric = build(spec)
    assert fabric.route("gpu0", "gpu3").label == "NV18"
    assert fabric.route("gpu0", "gpu4").level is not Level.NVLINK  # an L4
    assert fabric.route("gpu4", "fpga0").level is not Level.NVLINK


def test_numa_is_honoured_with_pcie_switches() -> None:
    spec = {"name": "x", "hosts": [{"name": "h", "sockets": 2, "pcie_switches": 2,
            "devices": [{"model": "H100-SXM", "count": 2, "numa": 1}]}]}  # fmt: skip
    fabric = build(spec)
    assert {d.numa for d in fabric.devices.values()} == {1}
    assert fabric.route("gpu0", "gpu1").label == "PIX"


def test_numa_beyond_the_sockets(tmp_path: Path) -> None:
    text = "name: x\nhosts:\n  - {name: h, devices: [{model: T4, numa: 7}]}\n"
    assert "numa 7 but the host has 1 socket" in fails(tmp_path, text)


def test_lanes_scale_pcie_bandwidth() -> None:
    spec = {"name": "x", "hosts": [{"name": "h", "devices": "2xL4",
            "links": [{"a": "gpu0", "b": "gpu1", "type": "PCIe5x16", "lanes": 4}]}]}  # fmt: skip
    fabric = build(spec)
    direct = [lk for lk in fabric.host_links("h") if {lk.a, lk.b} == {"h/gpu0", "h/gpu1"}]
    assert direct[0].bandwidth_gbps == pytest.approx(63 / 4) and direct[0].type.lanes == 4
    # the widest way is then through the CPU (31.5 GB/s each way), not the x4 cable
    assert fabric.route("gpu0", "gpu1").bandwidth_gbps == 31.5


def test_power_above_max_and_empty_model(tmp_path: Path) -> None:
    text = "name: x\nhosts:\n  - {name: h, devices: [{model: T4, idle_w: 500}]}\n"
    assert "idle_w = 500.0 is above max_w = 70" in fails(tmp_path, text)
    text = "name: x\nhosts:\n  - {name: h, devices: [{model: ''}]}\n"
    assert "at least 1 character" in fails(tmp_path, text)


def test_fat_tree_parameter_given_twice() -> None:
    from accelnet.fabric import load_preset

    with pytest.raises(FabricSpecError, match="hosts = '2': given twice"):
        load_preset("fat-tree:hosts=1,hosts=2")


def test_routes_never_pass_through_another_device() -> None:
    spec = {
        "name": "r1",
        "switches": [{"name": "nv", "kind": "nvswitch"}],
        "hosts": [{"name": "h{i}", "count": 2, "devices": "2xH100-SXM"}],
        "links": [{"a": f"h{i}/gpu0", "b": "nv", "type": "NVLink4", "count": 18} for i in (0, 1)],
    }
    fabric = build(spec)
    assert fabric.route("h0/gpu0", "h1/gpu0").level is Level.NVLINK
    with pytest.raises(NoRouteError):
        fabric.route("h0/gpu1", "h1/gpu1")  # gpu1 has no way out but through gpu0


def test_network_paths_are_widest_then_fastest() -> None:
    spec = {
        "name": "r2",
        "switches": [{"name": n, "kind": k} for n, k in
                     (("leafa", "leaf"), ("leafb", "leaf"), ("spine", "spine"))],
        "hosts": [{"name": h, "devices": "H100-SXM", "nics": "1xIB-NDR", "network": f"leaf{h}"}
                  for h in ("a", "b")],
        "links": [
            {"a": "leafa", "b": "leafb", "type": "Eth-1G", "latency_us": 0.1},
            {"a": "leafa", "b": "spine", "type": "IB-NDR"},
            {"a": "spine", "b": "leafb", "type": "IB-NDR"},
        ],
    }  # fmt: skip
    r = build(spec).route("a/gpu0", "b/gpu0")
    assert r.bandwidth_gbps == 50.0 and "spine" in r.nodes


def test_devices_and_models_are_hashable() -> None:
    from accelnet.fabric import load_preset

    fabric = load_preset("dgx-h100")
    devices = set(fabric.devices.values())
    assert len(devices) == 8
    assert len({d.model for d in devices}) == 1
    assert hash(device_model("H100")) == hash(device_model("H100-SXM"))


def test_catalog_figures_are_dense_and_consistent() -> None:
    assert device_model("A100").tflops("fp64") == 9.7  # type: ignore[arg-type]
    assert device_model("H100").tflops("fp64") == 34  # type: ignore[arg-type]
    orin = device_model("Jetson-AGX-Orin")
    assert orin.tflops("int8") == 85 and orin.integrated  # type: ignore[arg-type]


def test_schema_accepts_every_preset_and_the_compact_forms() -> None:
    schema = fabric_json_schema()
    for name in preset_names():
        jsonschema.validate(preset_spec(name), schema)
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    jsonschema.validate(yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```")[0]), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "hosts": [{"name": "h", "devices": 3}]}, schema)
    assert json.dumps(schema)  # serialisable
