"""Active health probes, after DCGM's diagnostic levels; they run inside the device's worker.

- **Level 1** (seconds): the device's worker answers (the probe ran at all, and how fast);
  memory can be allocated and holds what was written; a small computation gives the right
  answer (matrix products checked two ways and against an exact sum).
- **Level 2** (``stress_s`` seconds, 10 by default): matrix products in a loop, each
  result checked against the first, the first against a float64 reference; reports the
  rate reached.

On an NVIDIA GPU (``CUDA_VISIBLE_DEVICES`` set, not emulated) the probe uses ``torch.cuda``
when PyTorch is installed (imported here, lazily; extra ``torch``); without it the GPU's
computation cannot be checked and the probe says so (WARN). Everything else (CPU devices,
emulated devices) is checked with numpy on the CPU.

:func:`run_probe` is what the worker runs (a payload); it returns plain data. :func:`judge`
turns that into :class:`~accelnet.devices.health.Finding` s on the controller's side, and
:func:`no_answer` a probe that failed, died or timed out (which is a FAIL). An injected
fault (``inject``) makes the probe report a FAIL check ``injected`` after doing its work.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

from accelnet.devices.health import Finding, Status

PROBE_SCHEMA = "accelnet.probe/v1"
_CPU_MEMORY_BYTES = 64 * 1024 * 1024
_GPU_MEMORY_BYTES = 256 * 1024 * 1024


def run_probe(level: int = 1, stress_s: float = 10.0, inject: str | None = None) -> dict[str, Any]:
    """Probe this process's device at ``level`` (1 or 2); never raises for a failed check
    (each check's status says), only for a bad ``level``. Blocks for about a second at
    level 1 (plus importing torch on a GPU), ``stress_s`` more at level 2."""
    if level not in (1, 2):
        raise ValueError(f"probe level must be 1 or 2, got {level}")
    t0 = time.perf_counter()
    checks: list[dict[str, str]] = []
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1") and (
        os.environ.get("ACCELNET_EMULATED", "0") != "1"
    )
    backend = "numpy"
    if gpu:
        backend = _gpu_checks(level, stress_s, checks)
    else:
        _numpy_checks(level, stress_s, checks)
    if inject is not None:
        checks.append(_check("injected", "fail", inject, detail="fault injection"))
    return {"schema": PROBE_SCHEMA, "level": level, "backend": backend, "pid": os.getpid(),
            "device": os.environ.get("ACCELNET_DEVICE", ""), "checks": checks,
            "elapsed_s": time.perf_counter() - t0}  # fmt: skip


def _check(name: str, status: str, value: str, limit: str = "", detail: str = "") -> dict[str, str]:
    return {"check": name, "status": status, "value": value, "limit": limit, "detail": detail}


def _guard(checks: list[dict[str, str]], name: str, fn: Callable[[], dict[str, str]]) -> None:
    """Run one check; an exception is that check's FAIL."""
    try:
        checks.append(fn())
    except Exception as exc:
        checks.append(_check(name, "fail", f"{type(exc).__name__}: {exc}"))


# ----- CPU (numpy) ----------------------------------------------------------------------


def _numpy_checks(level: int, stress_s: float, checks: list[dict[str, str]]) -> None:
    _guard(checks, "memory", _numpy_memory)
    _guard(checks, "compute", _numpy_compute)
    if level >= 2:
        _guard(checks, "stress", lambda: _numpy_stress(stress_s))


def _numpy_memory() -> dict[str, str]:
    import numpy as np  # noqa: PLC0415 (the worker pays for numpy only when probed)

    n = _CPU_MEMORY_BYTES // 8
    a = np.empty(n, dtype=np.float64)
    a[:] = np.arange(n, dtype=np.int64) % 251
    got = float(a.sum())
    full, rest = divmod(n, 251)
    want = float(full * (250 * 251 // 2) + rest * (rest - 1) // 2)
    ok = got == want
    return _check("memory", "pass" if ok else "fail", f"{n * 8 >> 20} MiB written, sum {got:.0f}",
                  f"sum {want:.0f}")  # fmt: skip


def _operands(n: int, seed: int) -> tuple[Any, Any, Any]:
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, n)), rng.standard_normal((n, n)), rng.standard_normal(n)


def _numpy_compute() -> dict[str, str]:
    import numpy as np  # noqa: PLC0415

    a, b, x = _operands(256, 1)
    c = a @ b
    err = float(np.max(np.abs(c @ x - a @ (b @ x))) / max(1.0, float(np.max(np.abs(c @ x)))))
    # four entries summed exactly, in pure Python: a broken BLAS cannot agree with it
    worst = 0.0
    for i, j in ((0, 0), (17, 99), (128, 3), (255, 255)):
        exact = math.fsum(float(a[i, k]) * float(b[k, j]) for k in range(256))
        worst = max(worst, abs(float(c[i, j]) - exact) / max(1.0, abs(exact)))
    ok = err < 1e-8 and worst < 1e-10
    return _check("compute", "pass" if ok else "fail",
                  f"256x256 matmul: rel. error {max(err, worst):.1e}", "< 1e-8")  # fmt: skip


def _numpy_stress(stress_s: float) -> dict[str, str]:
    import numpy as np  # noqa: PLC0415

    n = 512
    a, b, _ = _operands(n, 2)
    first = a @ b
    scale = float(np.max(np.abs(first)))
    t0, runs, worst = time.perf_counter(), 0, 0.0
    while runs == 0 or time.perf_counter() - t0 < stress_s:
        c = a @ b
        worst = max(worst, float(np.max(np.abs(c - first))) / scale)
        runs += 1
    spent = time.perf_counter() - t0
    rate = 2 * n**3 * runs / spent / 1e9
    ok = worst < 1e-10
    return _check("stress", "pass" if ok else "fail",
                  f"{runs} matmuls {n}x{n} in {spent:.1f} s ({rate:.1f} GFLOP/s), "
                  f"max deviation {worst:.1e}", "< 1e-10")  # fmt: skip


# ----- NVIDIA GPU (torch.cuda) ------------------------------------------------------------


def _gpu_checks(level: int, stress_s: float, checks: list[dict[str, str]]) -> str:
    """The checks on this process's GPU; the backend used."""
    try:
        import torch  # noqa: PLC0415 (optional: extra torch)
    except ImportError:
        why = "GPU computation not checked: pip install 'accelnet[torch]'"
        checks.append(_check("compute", "warn", "torch is not installed", detail=why))
        _numpy_checks(1, stress_s, checks)
        return "numpy (no torch)"
    if torch.version.cuda is None:
        checks.append(_check("compute", "warn", f"torch {torch.__version__} has no CUDA",
                             detail="GPU computation not checked"))  # fmt: skip
        return "torch (cpu build)"
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        checks.append(_check("answer", "fail", "torch.cuda sees no GPU",
                             detail=f"CUDA_VISIBLE_DEVICES={visible}"))  # fmt: skip
        return "torch.cuda"
    dev = torch.device("cuda:0")

    def answer() -> dict[str, str]:
        t0 = time.perf_counter()
        torch.zeros(1, device=dev).add_(1)
        torch.cuda.synchronize(dev)
        name = torch.cuda.get_device_name(dev)
        return _check("answer", "pass", f"{name}: first kernel in {time.perf_counter() - t0:.2f} s")

    def memory() -> dict[str, str]:
        free, total = torch.cuda.mem_get_info(dev)
        n = min(_GPU_MEMORY_BYTES, free // 4) // 4
        buf = torch.ones(n, dtype=torch.float32, device=dev)
        got = int(buf.sum(dtype=torch.float64).item())
        del buf
        ok = got == n
        seen = f"{n * 4 >> 20} MiB of {total >> 20} MiB written, sum {got}"
        return _check("memory", "pass" if ok else "fail", seen, f"sum {n}")

    _guard(checks, "answer", answer)
    _guard(checks, "memory", memory)
    _guard(checks, "compute", lambda: _torch_matmul(torch, dev, 1024, 0.0))
    if level >= 2:
        _guard(checks, "stress", lambda: _torch_matmul(torch, dev, 2048, stress_s))
    return "torch.cuda"


def _torch_matmul(torch: Any, dev: Any, n: int, stress_s: float) -> dict[str, str]:
    """A float32 product on the GPU against float64 on the CPU; with ``stress_s``, repeated
    for that long, each result compared with the first."""
    import numpy as np  # noqa: PLC0415

    a, b, _ = _operands(n, 3)
    ref = a @ b
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # a true float32 product, restored below
    try:
        ga = torch.from_numpy(a.astype(np.float32)).to(dev)
        gb = torch.from_numpy(b.astype(np.float32)).to(dev)
        first = ga @ gb
        err = float(np.max(np.abs(first.double().cpu().numpy() - ref)) / np.max(np.abs(ref)))
        runs, same, spent = 1, True, 0.0
        if stress_s > 0:
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < stress_s:
                for _ in range(10):
                    c = ga @ gb
                runs += 10
                same = same and bool(torch.equal(c, first))
            torch.cuda.synchronize(dev)
            spent = time.perf_counter() - t0
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    ok = err < 1e-4 and same
    if stress_s > 0:
        rate = 2 * n**3 * (runs - 1) / spent / 1e12
        value = (f"{runs - 1} matmuls {n}x{n} fp32 in {spent:.1f} s ({rate:.1f} TFLOP/s), "
                 f"results {'identical' if same else 'DIFFER'}, rel. error {err:.1e}")  # fmt: skip
        return _check("stress", "pass" if ok else "fail", value, "< 1e-4, identical")
    return _check("compute", "pass" if ok else "fail",
                  f"{n}x{n} fp32 matmul: rel. error {err:.1e}", "< 1e-4")  # fmt: skip


# ----- the controller's side --------------------------------------------------------------


def judge(device: str, result: Any, at: float, answered_s: float | None = None) -> list[Finding]:
    """Every check of a probe's result as findings (PASS ones too), with the round trip
    (``answered_s``: from launch to result) as the ``answer`` check where the probe itself
    did not report one. A malformed result is a FAIL."""
    source = "probe"
    if not isinstance(result, dict) or result.get("schema") != PROBE_SCHEMA:
        return [
            Finding(
                device, "answer", Status.FAIL, at, source, f"not a probe result: {result!r}"[:200]
            )
        ]
    level = result.get("level", "?")
    out = []
    if answered_s is not None and not any(c.get("check") == "answer" for c in result["checks"]):
        out.append(Finding(device, "answer", Status.PASS, at, source,
                           f"worker pid {result.get('pid')} answered in {answered_s * 1000:.0f} ms",
                           detail=f"level {level}, {result.get('backend')}"))  # fmt: skip
    for c in result["checks"]:
        try:
            status = Status(c.get("status"))
        except ValueError:
            status = Status.FAIL
        out.append(Finding(device, str(c.get("check")), status, at, source, str(c.get("value", "")),
                           str(c.get("limit", "")), str(c.get("detail", ""))))  # fmt: skip
    return out


def no_answer(device: str, why: str, at: float) -> Finding:
    """A probe that failed to run, died with its worker or timed out: FAIL."""
    seen = why.splitlines()[0][:300] if why else "no answer"
    return Finding(
        device, "answer", Status.FAIL, at, "probe", seen, detail="the probe did not complete"
    )
