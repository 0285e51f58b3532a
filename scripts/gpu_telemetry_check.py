#!/usr/bin/env python3
"""Sample this machine's NVIDIA GPUs with accelnet's NVML sampler and print real readings.

    python scripts/gpu_telemetry_check.py                 # 5 samples, 1 s apart
    python scripts/gpu_telemetry_check.py -n 10 -p 0.5 --load 3 --json out.json

Needs ``pip install -e '.[nvidia]'`` (or nvidia-ml-py on the path; run from a checkout, the
script finds ``src/``). It discovers the GPUs (fabric discovery when accelnet's full
dependencies are installed, else NVML's own enumeration, named the same way), samples them
``-n`` times every ``-p`` seconds, prints one row per GPU and sample, the readings each GPU
does not support, and what sampling cost per device per sample. ``--load S`` keeps each GPU
busy for S seconds with PyTorch matrix products (when torch is installed) so that
utilization, power and clocks move. On a machine without an NVIDIA GPU, driver or
nvidia-ml-py it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

try:
    import accelnet.devices  # noqa: F401
except ImportError:  # a checkout without an install: use its src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from accelnet.devices import DeviceSample, SampleRing
from accelnet.devices.samplers.nvml import NvmlSampler
from accelnet.devices.samplers.poller import Poller, run_polling
from accelnet.devices.telemetry import SamplerUnavailableError

GIB = 2**30
COLUMNS = (
    ("t_s", 6),
    ("device", 14),
    ("util%", 5),
    ("mem%", 5),
    ("used/total GiB", 15),
    ("W", 7),
    ("energy J", 11),
    ("C", 4),
    ("SM/mem MHz", 10),
    ("ECC c/u", 8),
    ("remap", 7),
    ("NVLink up/dn", 12),
    ("PCIe", 7),
    ("xid", 6),
    ("throttle", 24),
)


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def row(x: DeviceSample, t0: float) -> list[str]:
    """One table row of a sample ('-' for a reading the GPU did not give)."""
    mem = "-"
    if x.mem_used_bytes is not None and x.mem_total_bytes is not None:
        mem = f"{x.mem_used_bytes / GIB:.1f}/{x.mem_total_bytes / GIB:.1f}"
    return [
        f"{x.time - t0:.2f}",
        x.device,
        _num(x.utilization_pct),
        _num(x.mem_util_pct),
        mem,
        _num(x.power_w, "{:.1f}"),
        _num(x.energy_j, "{:.1f}"),
        _num(x.temperature_c),
        f"{_num(x.sm_clock_mhz)}/{_num(x.mem_clock_mhz)}",
        f"{_num(x.ecc_corrected)}/{_num(x.ecc_uncorrected)}",
        _remap(x),
        f"{_num(x.nvlink_up)}/{_num(x.nvlink_down)}",
        f"{_num(x.pcie_gen)}x{_num(x.pcie_width)}",
        "-" if x.xid_events is None else ",".join(map(str, x.xid_events)) or "none",
        "-" if x.throttle_reasons is None else ",".join(x.throttle_reasons) or "none",
    ]


def _remap(x: DeviceSample) -> str:
    if x.remap_pending is None:
        return "-"
    return "FAILED" if x.remap_failed else "pending" if x.remap_pending else "ok"


def print_table(rows: list[list[str]]) -> None:
    """The rows under the column headers, aligned."""
    print("  ".join(name.rjust(w) for name, w in COLUMNS))
    for r in rows:
        print("  ".join(cell.rjust(w) for cell, (_, w) in zip(r, COLUMNS, strict=True)))


def open_sampler() -> tuple[NvmlSampler | None, str]:
    """The sampler over the discovered GPUs, or None and why there is none."""
    gpus: list[Any] | None = None
    how = "NVML enumeration"
    try:
        from accelnet.fabric import DeviceKind  # noqa: PLC0415 (needs pydantic & co.)
        from accelnet.fabric.discovery import discover  # noqa: PLC0415

        found = discover(cpu_devices="none")
        gpus = [d for d in found.fabric.devices.values() if d.kind is DeviceKind.GPU]
        how = "fabric discovery"
        if not gpus:
            return None, f"no NVIDIA GPU found ({found.notes[0] if found.notes else how})"
    except ImportError as exc:
        how = f"NVML enumeration (fabric discovery unavailable: {exc})"
    try:
        sampler = NvmlSampler(gpus)
    except SamplerUnavailableError as exc:
        return None, str(exc)
    if not sampler.devices():
        sampler.close()
        return None, f"no NVIDIA GPU found by {how}"
    return sampler, how


def gpu_load(seconds: float, stop: threading.Event) -> str:
    """Start matrix products on every GPU for ``seconds`` in a thread; what was started."""
    try:
        import torch  # noqa: PLC0415 (optional)
    except ImportError:
        return "no load: torch is not installed"
    if not torch.cuda.is_available():
        return "no load: torch sees no GPU"

    def work() -> None:
        end = time.monotonic() + seconds
        mats = []
        for i in range(torch.cuda.device_count()):
            a = torch.randn(8192, 8192, device=f"cuda:{i}", dtype=torch.bfloat16)
            mats.append((a, a.clone()))
        while time.monotonic() < end and not stop.is_set():
            for a, b in mats:
                a @ b
            torch.cuda.synchronize()

    threading.Thread(target=work, daemon=True).start()
    return f"load: bf16 matmuls on {torch.cuda.device_count()} GPU(s) for {seconds:g} s"


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 when done or when there is no GPU to check."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--samples", type=int, default=5, help="samples per GPU")
    ap.add_argument("-p", "--period", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--slow-every", type=int, default=1, help="read counters every k samples")
    ap.add_argument("--load", type=float, default=0.0, help="seconds of GPU load (torch)")
    ap.add_argument("--json", type=Path, help="also write the samples and costs here")
    args = ap.parse_args(argv)
    sampler, how = open_sampler()
    if sampler is None:
        print(f"gpu_telemetry_check: nothing to check here: {how}")
        return 0
    stop = threading.Event()
    ring = SampleRing(args.samples)
    poller = Poller([sampler], args.period, ring=ring)
    print(f"GPUs by {how}: {', '.join(sampler.devices())}")
    if sampler.unmatched:
        print(f"NVML GPUs not in the fabric (skipped): {sampler.unmatched}")
    if args.load > 0:
        print(gpu_load(args.load, stop))
        time.sleep(min(args.load, 1.0))  # let the load ramp up before the first sample
    t0 = time.monotonic()
    try:
        run_polling(poller, time.monotonic, time.sleep, args.samples)
    finally:
        stop.set()
        poller.close()
    samples = sorted(
        (x for d in sampler.devices() for x in ring.samples(d)), key=lambda x: (x.time, x.device)
    )
    print_table([row(x, t0) for x in samples])
    for d in sampler.devices():
        print(f"{d}: not supported: {', '.join(sorted(sampler.unsupported(d))) or 'nothing'}")
    errors = sorted({e for x in samples for e in x.errors})
    if errors:
        print(f"transient errors: {'; '.join(errors)}")
    (cost,) = poller.costs()
    print(
        f"sampling cost: {cost.per_device_sample_s * 1e6:.0f} us per device per sample "
        f"({cost.device_samples} device samples in {cost.seconds * 1e3:.1f} ms); "
        f"{cost.per_device_per_s(args.period) * 100:.4f}% of a core per device "
        f"at a {args.period:g} s period"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "how": how,
                    "samples": [x.to_json() for x in samples],
                    "cost_per_device_sample_s": cost.per_device_sample_s,
                    "period_s": args.period,
                    "unsupported": {d: sorted(sampler.unsupported(d)) for d in sampler.devices()},
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
