"""The default worker policy through the embedded cluster (issue 22): a device's worker
stays warm for the same tenant's next job (no process start on the hot path), is replaced
before another tenant's job, and after a job that asked for it (``fresh_worker``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import accelnet


def where() -> tuple[str, int]:
    return os.environ["ACCELNET_DEVICE"], os.getpid()


def _next_on(submit: Callable[..., Any], device: str, **spec: Any) -> int:
    """The pid of the next job (submitted with ``spec``) that lands on ``device``."""
    for _ in range(40):
        dev, pid = submit(where, **spec).result(timeout=60)
        if dev == device:
            return int(pid)
    raise AssertionError(f"no job landed on {device} in 40 tries")


def test_workers_stay_warm_per_tenant_and_a_job_may_ask_for_a_fresh_one(tmp_path: Path) -> None:
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path) as cluster:
        seen: dict[str, set[int]] = {}
        for _ in range(8):
            dev, pid = cluster.submit(where).result(timeout=60)
            seen.setdefault(dev, set()).add(pid)
        assert all(len(pids) == 1 for pids in seen.values()), seen  # one process per device
        device, (warm,) = next(iter(seen.items()))
        other = _next_on(cluster.submit, device, tenant="b")
        assert other != warm  # not where tenant default's Python ran
        back = _next_on(cluster.submit, device)
        assert back not in (warm, other)  # nor where b's did
        asked = _next_on(cluster.submit, device, fresh_worker=True)
        assert asked == back  # it runs in the warm worker, and leaves it to no one
        after = _next_on(cluster.submit, device)
        assert after not in (back, other, warm)
        assert _next_on(cluster.submit, device) == after  # warm again
