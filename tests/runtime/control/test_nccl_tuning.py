"""NCCL tuned from the fabric at launch (issue 23 item 4): a gang of NVIDIA GPUs is ranked
in the fabric's best ring order and each task gets its host's NCCL topology file and
adapters; every other job is launched as placed, with nothing added."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from accelnet.comm.nccl import ring_devices
from accelnet.comm.ring import ring_score
from accelnet.fabric import load_fabric
from accelnet.runtime.control.nccl_tuning import NcclTuning
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState

DUMP = (
    "import json, os, sys; json.dump(dict(os.environ), "
    "open(os.path.join(sys.argv[1], os.environ['ACCELNET_RANK'] + '.json'), 'w'))"
)


def test_a_bad_order_on_a_dgx1_is_ranked_along_nvlink(tmp_path: Path) -> None:
    fabric = load_fabric("dgx1-v100")
    tuning = NcclTuning(fabric, tmp_path / "nccl")
    placed = tuple(sorted(fabric.devices))[:8]
    bad = (placed[0], placed[5], placed[2], placed[7], placed[1], placed[6], placed[3], placed[4])
    assert tuning.applies(bad)
    ring = tuning.ring(bad)
    assert ring[0] == bad[0] and sorted(ring) == sorted(bad)
    assert ring == ring_devices(fabric, bad)
    assert tuning.ring(bad) is ring  # kept per placement
    from accelnet.comm.communicator import Communicator

    comm = Communicator(fabric, bad)
    better = Communicator(fabric, ring)
    assert ring_score(better, range(8)) >= ring_score(comm, range(8))


def test_each_host_gets_its_topology_file_and_adapters(tmp_path: Path) -> None:
    fabric = load_fabric("dgx-h100:hosts=2")
    tuning = NcclTuning(fabric, tmp_path / "nccl")
    hosts = sorted({d.host for d in fabric.devices.values()})
    gang = tuple(d for d in sorted(fabric.devices) if fabric.devices[d].kind.value == "gpu")
    gang = gang[:2] + tuple(d for d in gang if d.startswith(hosts[1] + "/"))[:2]
    ring = tuning.ring(gang)
    for host in hosts:
        env = tuning.env(ring, host)
        assert "CUDA_VISIBLE_DEVICES" not in env  # the backend's (emulated fabrics: none)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        root = ET.parse(env["NCCL_TOPO_FILE"]).getroot()
        assert root.tag == "system" and len(root.findall(".//gpu")) == 8  # its own 8 only
        assert env["NCCL_IB_HCA"].startswith("=mlx5_")
        assert Path(env["NCCL_TOPO_FILE"]).stat().st_mode & 0o044 == 0o044  # any user reads
    assert not tuning.applies(gang[:1])  # one device: nothing to tune
    lab = load_fabric("mixed-lab")
    jetsons = tuple(d for d in lab.devices if d.startswith("jetson"))
    assert not NcclTuning(lab, tmp_path / "lab").applies(jetsons)  # no NCCL on Jetson


def test_a_gangs_ranks_follow_the_ring_and_see_nccl_variables(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with LocalCluster("pcie-4xL4", workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(
            JobSpec.model_validate(
                {
                    "name": "nccl",
                    "resources": {"accelerators": "L4:4"},
                    "run": f'{sys.executable} -c "{DUMP}" {out}',
                    "env": {"NCCL_SOCKET_IFNAME": "=lo"},  # the job's own env wins
                }
            )
        )
        rec = job.wait(120)
        assert rec.state is JobState.SUCCEEDED, rec.error
        fabric = cluster.fabric
    assert rec.placement is not None
    envs = [json.loads((out / f"{r}.json").read_text()) for r in range(4)]
    ring = ring_devices(fabric, rec.placement.devices)
    assert [e["ACCELNET_DEVICE"] for e in envs] == list(ring)  # rank r on the ring's r-th
    for e in envs:
        assert e["CUDA_VISIBLE_DEVICES"] == ""  # emulated: no real GPU shown
        assert Path(e["NCCL_TOPO_FILE"]).is_file() and e["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert e["NCCL_SOCKET_IFNAME"] == "=lo"


def test_other_jobs_get_no_nccl_variables(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with LocalCluster("mixed-lab", workdir=tmp_path / "work") as cluster:
        one = cluster.submit_spec(JobSpec.model_validate({
            "name": "one", "resources": {"accelerators": "L4:1"},
            "run": f"{sys.executable} -c \"{DUMP}\" {out}",
        }))  # fmt: skip
        assert one.wait(120).state is JobState.SUCCEEDED
    env = json.loads((out / "0.json").read_text())
    assert not [k for k in env if k.startswith("NCCL_")]
