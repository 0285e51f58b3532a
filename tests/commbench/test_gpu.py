"""NCCL on real NVIDIA GPUs (deselected by default; run with ``-m gpu`` on a machine with
at least two GPUs and the CUDA build of torch)."""

from __future__ import annotations

import pytest

from accelnet.comm import CostModel
from accelnet.commbench import Settings, benchmark, make_steps, plan_bench
from accelnet.commbench.affinity import physical_cores
from accelnet.fabric import DeviceKind
from accelnet.fabric.discovery import discover

pytestmark = pytest.mark.gpu


def test_nccl_allreduce_and_allgather_on_cuda_devices() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    local = discover("per-core").fabric
    gpus = [d.name for d in local.devices.values() if d.kind is DeviceKind.GPU]
    if len(gpus) < 2 or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 NVIDIA GPUs")
    plan = plan_bench(local, gpus[:2], local, physical_cores())
    assert plan.backend == "nccl"
    assert sorted(b.cuda_index for b in plan.bindings) == sorted(
        int(g.removeprefix("gpu")) for g in gpus[:2]
    )
    steps = make_steps(["allreduce", "allgather"], [1 << 10, 1 << 24], plan.ranks)
    rows = benchmark(plan, steps, Settings(warmup=2, iters=5), CostModel())
    assert [(r.collective, r.nbytes) for r in rows] == [(s.collective, s.nbytes) for s in steps]
    for r in rows:
        assert r.time_s > 0
        assert r.busbw_gbps == r.algbw_gbps * (1.0 if r.collective == "allreduce" else 0.5)
        assert r.predicted.busbw_gbps > 0
