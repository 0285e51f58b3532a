"""Fabric files: good ones build, bad ones fail with file, line, key path and value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelnet.fabric import FabricSpecError, Level, load_fabric_file, load_spec
from accelnet.fabric.build import build_fabric, parse_spec

GOOD = """\
name: lab
description: two racks and an edge device
switches:
  - {name: leaf0, kind: leaf, pod: pod0}
  - {name: ap0, kind: wireless_ap, pod: pod0}
hosts:
  - name: "n{i}"
    count: 4
    devices: 8xH100-SXM
    nvlink: nvswitch
    sockets: 2
    pcie_switches: 4
    nics: 8xIB-NDR
    network: leaf0
  - name: edge0
    devices: Jetson-AGX-Orin
    nics: 1xWiFi6
    network: ap0
links:
  - {a: ap0, b: leaf0, type: Eth-10G}
"""


def write(tmp_path: Path, text: str, name: str = "fabric.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def errors_of(path: Path) -> str:
    with pytest.raises(FabricSpecError) as info:
        load_fabric_file(path)
    return str(info.value)


def test_good_file_builds_every_host_device_and_link(tmp_path: Path) -> None:
    fabric = load_fabric_file(write(tmp_path, GOOD))
    assert [h.name for h in fabric.hosts] == ["n0", "n1", "n2", "n3", "edge0"]
    assert len(fabric.devices) == 33
    assert fabric.model_counts() == {"H100-SXM": 32, "Jetson-AGX-Orin": 1}
    # 4 hosts x 8 NIC uplinks + 1 Wi-Fi uplink + the AP-leaf link
    assert len(fabric.external_links) == 34
    assert fabric.route("n0/gpu0", "n3/gpu7").level is Level.NETWORK_LEAF
    assert fabric.route("n0/gpu0", "edge0/gpu0").level is Level.WIRELESS
    # hosts built from one entry share a layout
    assert len({h.layout_key for h in fabric.hosts}) == 2


def test_json_file_is_accepted(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(GOOD)
    fabric = load_fabric_file(write(tmp_path, json.dumps(data), "fabric.json"))
    assert len(fabric.devices) == 33


def test_readme_example_is_valid() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    import yaml

    fabric = build_fabric(parse_spec(yaml.safe_load(block), "README.md"))
    assert len(fabric.devices) == 33


def test_typo_in_a_key_names_file_line_and_key(tmp_path: Path) -> None:
    text = GOOD.replace("    sockets: 2\n", "    sokets: 2\n")
    msg = errors_of(write(tmp_path, text))
    assert "fabric.yaml:11: hosts[0].sokets: unknown key" in msg
    assert "allowed here:" in msg and "sockets" in msg


def test_unknown_model_lists_known_models_with_path_and_value(tmp_path: Path) -> None:
    text = GOOD.replace("devices: 8xH100-SXM", "devices: 8xH900")
    msg = errors_of(write(tmp_path, text))
    assert "hosts[0].devices = '8xH900'" in msg
    assert "unknown device model 'H900'" in msg
    assert "H100-SXM" in msg and "A100-SXM4-80GB" in msg  # the known models are listed
    assert "fabric.yaml:9:" in msg


def test_unknown_model_with_explicit_numbers_is_accepted(tmp_path: Path) -> None:
    text = GOOD.replace(
        "devices: 8xH100-SXM",
        "devices: [{model: MyNPU, count: 4, kind: npu, memory_gb: 32, mem_bw_gbps: 800, "
        "peak_tflops: {bf16: 100}, max_w: 150}]",
    ).replace("nvlink: nvswitch", "nvlink: none")
    fabric = load_fabric_file(write(tmp_path, text))
    dev = fabric.device("n0/npu0")
    assert dev.model.name == "MyNPU"
    assert dev.model.memory_gb == 32
    assert dev.model.idle_w == pytest.approx(22.5)  # 15 % of max when not given


def test_unknown_link_type_lists_known_types(tmp_path: Path) -> None:
    text = GOOD.replace("type: Eth-10G", "type: Eth-11G")
    msg = errors_of(write(tmp_path, text))
    assert "links[0]" in msg
    assert "unknown link type 'Eth-11G'" in msg and "IB-NDR" in msg


def test_link_to_missing_node_names_the_end(tmp_path: Path) -> None:
    text = GOOD.replace("{a: ap0, b: leaf0", "{a: ap0, b: leaf9")
    msg = errors_of(write(tmp_path, text))
    assert "links[0].b = 'leaf9': no switch 'leaf9'" in msg
    assert "leaf0" in msg  # the known switches are listed


def test_link_to_missing_device_of_existing_host(tmp_path: Path) -> None:
    text = GOOD.replace("{a: ap0, b: leaf0", "{a: n0/gpu9, b: leaf0")
    msg = errors_of(write(tmp_path, text))
    assert "links[0].a = 'n0/gpu9': host 'n0' has no node 'gpu9'" in msg


def test_network_switch_that_does_not_exist(tmp_path: Path) -> None:
    text = GOOD.replace("network: ap0", "network: ap1")
    msg = errors_of(write(tmp_path, text))
    assert "hosts[1].network = 'ap1': no switch 'ap1'" in msg


def test_bad_values_are_all_reported_with_their_values(tmp_path: Path) -> None:
    text = GOOD.replace("count: 4", "count: -1").replace("sockets: 2", "sockets: many")
    msg = errors_of(write(tmp_path, text))
    assert "2 problems" in msg
    assert "hosts[0].count = -1" in msg
    assert "hosts[0].sockets = 'many'" in msg


def test_missing_required_key(tmp_path: Path) -> None:
    msg = errors_of(write(tmp_path, "name: x\nhosts:\n  - {name: a}\n"))
    assert "hosts[0].devices: Field required" in msg


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    text = GOOD.replace("    sockets: 2\n", "    sockets: 2\n    sockets: 1\n")
    msg = errors_of(write(tmp_path, text))
    assert "duplicate key 'sockets'" in msg
    assert "fabric.yaml:12" in msg


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    msg = errors_of(write(tmp_path, "name: x\nhosts: [\n  {name: a\n"))
    assert "not valid YAML" in msg
    assert "fabric.yaml:" in msg


def test_duplicate_host_names(tmp_path: Path) -> None:
    text = GOOD.replace("name: edge0", 'name: "n1"')
    msg = errors_of(write(tmp_path, text))
    assert "hosts[1].name = 'n1': duplicate name 'n1'" in msg


def test_network_list_must_match_adapters(tmp_path: Path) -> None:
    text = GOOD.replace("network: leaf0", "network: [leaf0, leaf0]")
    msg = errors_of(write(tmp_path, text))
    assert "network lists 2 switches for 8 adapters" in msg


def test_pcie_switch_is_not_a_network_switch(tmp_path: Path) -> None:
    text = GOOD.replace("kind: wireless_ap", "kind: pcie_switch")
    msg = errors_of(write(tmp_path, text))
    assert "switches[1].kind = 'pcie_switch'" in msg and "inside a host" in msg


def test_nvlink_on_a_model_without_it(tmp_path: Path) -> None:
    text = GOOD.replace("devices: 8xH100-SXM", "devices: 8xL4")
    msg = errors_of(write(tmp_path, text))
    assert "hosts[0]: nvlink: nvswitch but L4 have no NVLink" in msg
    assert "fabric.yaml:7" in msg


def test_not_a_mapping(tmp_path: Path) -> None:
    msg = errors_of(write(tmp_path, "- just\n- a list\n"))
    assert "a fabric spec is a mapping" in msg


def test_missing_file() -> None:
    with pytest.raises(FabricSpecError, match="cannot read"):
        load_spec("/nonexistent/fabric.yaml")


def test_host_name_with_slash_is_rejected(tmp_path: Path) -> None:
    msg = errors_of(write(tmp_path, "name: x\nhosts:\n  - {name: a/b, devices: T4}\n"))
    assert "hosts[0].name = 'a/b'" in msg


def test_explicit_link_numbers_override_the_type(tmp_path: Path) -> None:
    text = GOOD.replace(
        "{a: ap0, b: leaf0, type: Eth-10G}",
        "{a: ap0, b: leaf0, type: Eth-10G, latency_us: 42, count: 2}",
    )
    fabric = load_fabric_file(write(tmp_path, text))
    link = next(lk for lk in fabric.external_links if {lk.a, lk.b} == {"ap0", "leaf0"})
    assert link.latency_us == 42
    assert link.bandwidth_gbps == pytest.approx(2.5)
    assert link.type.count == 2


def test_intra_host_extra_links(tmp_path: Path) -> None:
    text = (
        "name: bridged\nhosts:\n  - name: box\n    devices: 2xL40S\n"
        "    links: [{a: gpu0, b: gpu1, type: NVLink4, count: 4}]\n"
    )
    fabric = load_fabric_file(write(tmp_path, text))
    r = fabric.route("gpu0", "gpu1")
    assert r.level is Level.NVLINK and r.label == "NV4"
    assert r.bandwidth_gbps == 100.0


def test_intra_host_link_to_unknown_node(tmp_path: Path) -> None:
    text = (
        "name: bridged\nhosts:\n  - name: box\n    devices: 2xL40S\n"
        "    links: [{a: gpu0, b: gpu7, type: NVLink4}]\n"
    )
    msg = errors_of(write(tmp_path, text))
    assert "hosts[0]" in msg and "no node 'gpu7' in this host" in msg


def test_schema_is_generated_from_the_models() -> None:
    from accelnet.fabric.spec import FabricSpec

    schema = FabricSpec.model_json_schema()
    host = schema["$defs"]["HostSpec"]
    assert host["additionalProperties"] is False
    assert "description" in host["properties"]["sockets"]


def test_docs_example_is_valid() -> None:
    import yaml

    doc = (Path(__file__).parents[2] / "docs" / "fabric-spec.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    fabric = build_fabric(parse_spec(yaml.safe_load(block), "docs/fabric-spec.md"))
    assert fabric.route("box/gpu0", "box/gpu1").label == "NV4"
    assert fabric.device("box/npu0").model.name == "MyNPU"


# ----- CPU cores and host memory (what jobs may be given beside the devices) ----------------

CAPACITY = """\
name: capacity
hosts:
  - {name: "n{i}", count: 2, devices: 8xH100-SXM, cpus: 224, memory_gb: 2048}
  - {name: half, devices: 2xL4, cpus: 7.5, memory_gb: 62.5}
  - {name: open, devices: 1xT4}
"""


def test_hosts_carry_the_cpus_and_memory_they_declare(tmp_path: Path) -> None:
    fabric = load_fabric_file(write(tmp_path, CAPACITY))
    got = {h.name: (h.cpus, h.memory_gb) for h in fabric.hosts}
    assert got == {
        "n0": (224, 2048),
        "n1": (224, 2048),
        "half": (7.5, 62.5),
        "open": (None, None),  # not declared: not limited
    }
    # capacities are host facts, not layout facts: replicas still share one layout
    assert fabric.host("n0").layout is fabric.host("n1").layout


@pytest.mark.parametrize("key", ["cpus", "memory_gb"])
@pytest.mark.parametrize(
    ("value", "shown", "why"),
    [
        ("0", "0", "greater than 0"),
        ("-4", "-4", "greater than 0"),
        ("'8'", "'8'", "text, not a number"),
        ("eight", "'eight'", "text, not a number"),
        ("true", "True", "true/false, not a number"),
        (".nan", "nan", "finite number"),
        (".inf", "inf", "finite number"),
        ("2000000", "2000000", "less than or equal to"),
    ],
)
def test_bad_cpus_or_memory_names_key_and_value(
    tmp_path: Path, key: str, value: str, shown: str, why: str
) -> None:
    given = {"cpus": "7.5", "memory_gb": "62.5"}[key]
    text = CAPACITY.replace(f"{key}: {given}", f"{key}: {value}")
    assert text != CAPACITY
    msg = errors_of(write(tmp_path, text))
    assert f"fabric.yaml:4: hosts[1].{key} = {shown}: " in msg
    assert why in msg
    assert "1 problem" in msg


def test_cpus_and_memory_keep_through_a_spec_round_trip() -> None:
    import yaml

    spec = parse_spec(yaml.safe_load(CAPACITY), "capacity.yaml")
    again = parse_spec(json.loads(json.dumps(spec.model_dump(mode="json"))), "again.json")
    fabric = build_fabric(again)
    assert [(h.cpus, h.memory_gb) for h in fabric.hosts] == [
        (224, 2048), (224, 2048), (7.5, 62.5), (None, None),
    ]  # fmt: skip


def test_json_export_carries_cpus_and_memory_and_they_survive_json() -> None:
    import yaml

    from accelnet.fabric.export import fabric_to_json

    fabric = build_fabric(parse_spec(yaml.safe_load(CAPACITY), "capacity.yaml"))
    data = json.loads(json.dumps(fabric_to_json(fabric, matrix=False), allow_nan=False))
    assert [(h["name"], h["cpus"], h["memory_gb"]) for h in data["hosts"]] == [
        ("n0", 224, 2048), ("n1", 224, 2048), ("half", 7.5, 62.5), ("open", None, None),
    ]  # fmt: skip
    # what the export says matches what a reload of the same file builds
    reloaded = build_fabric(parse_spec(yaml.safe_load(CAPACITY), "capacity.yaml"))
    for entry, host in zip(data["hosts"], reloaded.hosts, strict=True):
        assert (entry["cpus"], entry["memory_gb"]) == (host.cpus, host.memory_gb)


def test_schema_documents_cpus_and_memory() -> None:
    from accelnet.fabric.spec import fabric_json_schema

    host = fabric_json_schema()["$defs"]["HostSpec"]["properties"]
    assert "not limited" in host["cpus"]["description"]
    assert "RAM" in host["memory_gb"]["description"]


@pytest.mark.parametrize("key", ["cpus", "memory_gb"])
@pytest.mark.parametrize("value", [0, -1, -0.5, float("nan"), float("inf"), "8", True])
def test_builder_rejects_bad_cpus_or_memory_naming_host_key_and_value(
    key: str, value: object
) -> None:
    from accelnet.fabric import FabricBuilder, FabricError, load_preset

    layout = load_preset("pcie-4xL4").hosts[0].layout
    builder = FabricBuilder("f")
    with pytest.raises(FabricError) as info:
        builder.add_host("box", layout, **{key: value})  # type: ignore[arg-type]
    assert f"host 'box': {key} = {value!r} must be a finite number > 0" in str(info.value)
    assert not builder.has_host("box")  # nothing half-added


def test_builder_stores_cpus_and_memory_as_floats() -> None:
    from accelnet.fabric import FabricBuilder, load_preset

    layout = load_preset("pcie-4xL4").hosts[0].layout
    builder = FabricBuilder("f")
    host = builder.add_host("box", layout, cpus=64, memory_gb=503.2)
    plain = builder.add_host("plain", layout)
    fabric = builder.build()
    assert (host.cpus, host.memory_gb) == (64.0, 503.2)
    assert isinstance(host.cpus, float)
    assert (plain.cpus, plain.memory_gb) == (None, None)
    assert fabric.host("box") is host
