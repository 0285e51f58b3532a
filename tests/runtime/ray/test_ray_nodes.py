"""The Ray backend's parts that need no cluster: what a node reports (discovered or
emulated), the fabric made of the reports, matching nodes to declared hosts, and the
clear error when Ray is not installed."""

from __future__ import annotations

import pickle
import sys

import pytest
from typer.testing import CliRunner

from accelnet.cli.main import app
from accelnet.fabric import SwitchKind, build_fabric, parse_spec
from accelnet.fabric.catalog import device_model
from accelnet.fabric.model import Level
from accelnet.runtime.ray.connect import RayUnavailableError, claim, import_ray
from accelnet.runtime.ray.nodes import (
    EMULATE_ENV,
    EMULATE_LABEL,
    HOST_LABEL,
    LEAF,
    EmulationError,
    build_fabric_of,
    describe_node,
    emulated_layout,
    mismatch,
    model_from_data,
    model_to_data,
    unique_hosts,
)

NODE = "ab" * 28  # a Ray node id's length


def test_emulated_nodes_report_presets_and_device_groups() -> None:
    r = describe_node(NODE, {EMULATE_LABEL: "2xT4_1xL4", HOST_LABEL: "edge"})
    assert (r.host, r.named, r.emulated) == ("edge", True, True)
    assert r.signature() == (("gpu0", "T4"), ("gpu1", "T4"), ("gpu2", "L4"))
    assert r.describe() == "2 x T4, 1 x L4 (emulated)"
    preset = describe_node(NODE, {EMULATE_LABEL: "pcie-4xL4"})
    assert [m for _, m in preset.signature()] == ["L4"] * 4
    assert not preset.named  # the machine's own name
    assert pickle.loads(pickle.dumps(r)) == r  # plain data: it travels through Ray
    with pytest.raises(
        EmulationError,
        match=r"not a preset and not device groups.*'NoSuchGPU'.*presets: .*pcie-4xL4",
    ):
        emulated_layout("9xNoSuchGPU")


def test_the_environment_can_ask_for_emulation_and_labels_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EMULATE_ENV, "1xA100-SXM4-80GB")
    assert describe_node(NODE, {}).signature() == (("gpu0", "A100-SXM4-80GB"),)
    assert describe_node(NODE, {EMULATE_LABEL: "1xT4"}).signature() == (("gpu0", "T4"),)
    monkeypatch.delenv(EMULATE_ENV)
    real = describe_node(NODE, {})  # this machine, discovered: CPU cores at least
    assert not real.emulated and real.devices


def test_models_travel_by_value_and_come_back_as_the_catalogs() -> None:
    t4 = device_model("T4")
    assert model_from_data(model_to_data(t4)) is t4  # models compare by identity
    odd = model_from_data({**model_to_data(t4), "name": "T4-custom", "aliases": []})
    assert odd.name == "T4-custom" and odd is not t4 and odd.peak_tflops == t4.peak_tflops


def test_the_fabric_of_the_nodes_one_leaf_and_unique_host_names() -> None:
    a = describe_node(NODE, {EMULATE_LABEL: "2xT4"})
    b = describe_node("cd" * 28, {EMULATE_LABEL: "2xT4"})
    named = describe_node("ef" * 28, {EMULATE_LABEL: "1xL4", HOST_LABEL: "lab"})
    reports = unique_hosts([a, b, named])
    hosts = [r.host for r in reports]
    assert hosts[2] == "lab" and hosts[0] != hosts[1]  # same machine name: made unique
    assert hosts[0].endswith("-" + NODE[:6])
    fabric = build_fabric_of(reports, network="Eth-100G")
    assert fabric.switches[LEAF].kind is SwitchKind.LEAF
    assert {lk.type.generation for lk in fabric.external_links} == {"100GbE"}
    assert fabric.level(f"{hosts[0]}/gpu0", "lab/gpu0") is Level.NETWORK_LEAF
    assert fabric.hosts[0].layout is fabric.hosts[1].layout  # alike: one shared layout


def test_nodes_claim_the_declared_hosts_they_match() -> None:
    spec = {"name": "d", "hosts": [{"name": "a", "devices": "2xT4"},
                                   {"name": "b", "devices": "1xL4"}]}  # fmt: skip
    declared = build_fabric(parse_spec(spec, "test"))
    good = describe_node(NODE, {EMULATE_LABEL: "2xT4", HOST_LABEL: "a"})
    wrong = describe_node("cd" * 28, {EMULATE_LABEL: "2xL4", HOST_LABEL: "b"})
    twice = describe_node("ef" * 28, {EMULATE_LABEL: "2xT4", HOST_LABEL: "a"})
    stranger = describe_node("01" * 28, {EMULATE_LABEL: "2xT4", HOST_LABEL: "z"})
    assert mismatch(declared, good) is None
    assert "should have gpu0=L4; the node has gpu0=L4, gpu1=L4" in (mismatch(declared, wrong) or "")
    assert "no host 'z'" in (mismatch(declared, stranger) or "")
    notes: list[str] = []
    assert claim(declared, [good, wrong, twice, stranger], notes) == [good]
    assert len(notes) == 3 and "already is host a" in notes[1]


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(RayUnavailableError, match=r"pip install 'accelnet\[ray\]'"):
        import_ray()
    result = CliRunner().invoke(app, ["demo", "--backend", "ray", "--quick"])
    assert result.exit_code == 1
    assert "accelnet[ray]" in result.stderr
    result = CliRunner().invoke(app, ["demo", "--backend", "spark"])
    assert result.exit_code == 2 and "valid: local, ray" in result.stderr
