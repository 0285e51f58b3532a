"""Device management: what telemetry sampling costs, and how fast a fault is recovered from.

**(a) Sampling overhead per device per second.** Each sampler is called ``--calls`` times
back to back (sample times ``period`` apart on a fake clock), ``--repeats`` times,
interleaved; the CPU time of this process (``time.process_time``) over the calls, divided by
calls and devices, is the cost per device per sample; divided by the default period of a
local cluster (2 s) it is the **CPU time per device per second of sampling** (µs/s, i.e.
millionths of a core). Medians over the repeats. The samplers:

- ``host``: :class:`HostSampler` over this machine's CPU devices (psutil; RAPL where
  readable);
- ``emulated``: :class:`EmulatedSampler` over the 4 emulated devices of ``pcie-4xL4``,
  each with a live worker process (psutil on the worker and, every 5th sample, its
  children);
- ``nvml (fake)``: :class:`NvmlSampler` against the faithful NVML fake of the tests, 8 x
  H100 with 18 NVLinks each: the sampler's own Python cost (a real driver adds its call
  latency: ``scripts/gpu_telemetry_check.py``);
- ``listeners``: what the live system adds per sample since issue 8: the energy meter
  (:class:`EnergyBook`, one job holding each device) and the history (one-minute buckets
  written to a ``MemoryStore``), fed the emulated samples.

With ``--live-rounds N`` each sampler also runs in a :class:`Poller` at the real 2 s period
for N rounds (real sleeps) and the CPU time over that window is reported the same way: the
figure with real spacing (caches cold, psutil's per-process state aged).

**(b) Fault to running elsewhere.** One :class:`LocalCluster` on ``pcie-4xL4`` (emulated
devices, real worker processes, the default remediation policy with ``max_failures``
raised to 1000 and no backoff, so the device never goes OFFLINE). Workers are warmed with
one job per device. Each trial submits a Python job (``time.sleep`` in 10 ms steps, up to
60 s; ``max_retries=1``), waits until it is RUNNING, injects ``fail`` on its device
(``cluster.inject``), waits until ``cluster.recoveries()`` has the job running again, then
cancels it and waits until every device is READY and healthy again (the failed one is reset
and probed) before the next trial. The figure is the time from the ``fault:fail`` event to
the job's next ``job:running`` event (both stamped by the controller's clock), split at its
``job:starting`` (placed again). Median and p95 over ``--trials``.

Run from the project root::

    .venv/bin/python bench/device_bench.py [--calls 200 --repeats 5 --trials 20 --live-rounds 5]

It prints two tables and writes ``bench/results/device.json``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cloudpickle
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the NVML fake lives with the tests

from tests.devices import nvml_telemetry_fake as nft  # noqa: E402
from tests.fabric import nvml_fake as nf  # noqa: E402

from accelnet.devices.power import DevicePower  # noqa: E402
from accelnet.devices.remediation import KindPolicy, RemediationPolicy  # noqa: E402
from accelnet.devices.samplers import EmulatedSampler, HostSampler, NvmlSampler, Poller  # noqa: E402
from accelnet.devices.telemetry import DeviceSample, Sampler  # noqa: E402
from accelnet.fabric import load_fabric  # noqa: E402
from accelnet.fabric.model import DeviceKind  # noqa: E402
from accelnet.runtime.backend import TaskEventKind, TaskSpec  # noqa: E402
from accelnet.runtime.care.energy_book import EnergyBook  # noqa: E402
from accelnet.runtime.care.history_keeper import HistoryKeeper  # noqa: E402
from accelnet.runtime.clock import SystemClock  # noqa: E402
from accelnet.runtime.control.store import MemoryStore  # noqa: E402
from accelnet.runtime.local.backend import LocalBackend  # noqa: E402
from accelnet.runtime.sdk import LocalCluster  # noqa: E402
from accelnet.sched import JobState  # noqa: E402
from benchutil import run_and_report, source_state, src_label  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "device.json"
PERIOD_S = 2.0  # LocalCluster's default sample_period_s
EMULATED = "pcie-4xL4"
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def spin(seconds: float) -> str:
    """The trial job: sleeps in 10 ms steps (a Python task, so cancel kills its worker)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)
    return os.environ["ACCELNET_DEVICE"]


class _Listeners(Sampler):
    """The live system's per-sample additions (energy book, history), fed a sampler's output."""

    source = "listeners"

    def __init__(self, inner: Sampler, devices: Sequence[str]) -> None:
        self.inner = inner
        fabric = load_fabric(EMULATED)
        self.book = EnergyBook({d: DevicePower.of(fabric.devices[d]) for d in devices})
        for d in devices:
            self.book.start(f"job-{d}#1", f"job-{d}", [d], 0.0)
        self.history = HistoryKeeper(MemoryStore())
        self.samples: list[DeviceSample] = []

    def devices(self) -> tuple[str, ...]:
        return self.inner.devices()

    def prepare(self, now: float) -> None:
        """Take the inner sampler's samples outside the timed part."""
        self.samples = self.inner.sample(now)

    def sample(self, now: float) -> list[DeviceSample]:
        self.book.observe(self.samples)
        self.history.observe(self.samples, now)
        return self.samples


def _timed(sampler: Sampler, calls: int, start: float) -> tuple[float, float, int]:
    """CPU and wall seconds over ``calls`` samples; samples per call."""
    got = 0
    cpu = wall = 0.0
    for k in range(calls):
        now = start + k * PERIOD_S
        if isinstance(sampler, _Listeners):
            sampler.prepare(now)
        c0, w0 = time.process_time(), time.perf_counter()
        got = len(sampler.sample(now))
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
    return cpu, wall, got


def _live(sampler: Sampler, rounds: int) -> float:
    """CPU seconds of this process per device per second over ``rounds`` real periods of a
    :class:`Poller` (sleeping between samples, as the controller's loop waits)."""
    poller = Poller([sampler], PERIOD_S)
    c0, t0 = time.process_time(), time.monotonic()
    got = 0
    for k in range(rounds):
        got = len(poller.poll(time.monotonic())) or got
        time.sleep(max(0.0, t0 + (k + 1) * PERIOD_S - time.monotonic()))
    return (time.process_time() - c0) / max(1, got) / (rounds * PERIOD_S)


def _warm(backend: LocalBackend, devices: Sequence[str], log_dir: Path) -> None:
    """A worker process on every device (a trivial Python task each)."""
    payload = cloudpickle.dumps((int, (), {}))
    for k, dev in enumerate(devices):
        backend.launch(TaskSpec(f"warm{k}", "warm", 0, 1, dev, (dev,), payload=payload,
                                log_dir=str(log_dir)))  # fmt: skip
    done = 0
    end = time.monotonic() + 60
    while done < len(devices) and time.monotonic() < end:
        done += sum(1 for ev in backend.poll(1.0) if ev.kind is TaskEventKind.SUCCEEDED)


def sampling(args: argparse.Namespace, console: Console, work: Path) -> dict[str, Any]:
    """Part (a)."""
    local = load_fabric(None)
    cpus = [d for d in local.devices.values() if d.kind is DeviceKind.CPU]
    emulated = load_fabric(EMULATED)
    ids = list(emulated.devices)
    backend = LocalBackend(emulated.devices, work / "sampling", SystemClock(), emulated=True)
    out: dict[str, Any] = {}
    with backend:
        _warm(backend, ids, work / "logs")
        emu = EmulatedSampler(ids, backend.worker_pid)
        samplers: dict[str, Callable[[], Sampler]] = {
            "host": lambda: HostSampler(cpus),
            "emulated": lambda: emu,
            "nvml (fake)": lambda: NvmlSampler(nvml=nft.fake(nf.dgx_h100()), host="dgx"),
            "listeners": lambda: _Listeners(emu, ids),
        }
        made = {name: make() for name, make in samplers.items()}
        for s in made.values():  # first samples (utilization baselines, NVLink probing)
            s.sample(0.0)
        runs: dict[str, list[dict[str, float]]] = {n: [] for n in made}
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())  # fmt: skip
        # no refresh thread: its CPU time would count in process_time (refreshed by hand)
        with Progress(*columns, console=console, transient=True, auto_refresh=False) as progress:
            task = progress.add_task("sampling overhead", total=args.repeats * len(made))
            for r in range(args.repeats):
                names = list(made)
                names = names[r % len(names) :] + names[: r % len(names)]  # rotate the order
                for name in names:
                    cpu, wall, n = _timed(made[name], args.calls, PERIOD_S * (1 + r * args.calls))
                    per = args.calls * max(1, n)
                    runs[name].append({"cpu_per_device_sample_us": cpu / per * 1e6,
                                       "wall_per_device_sample_us": wall / per * 1e6,
                                       "devices": n})  # fmt: skip
                    progress.advance(task)
                    progress.refresh()
            live: dict[str, float | None] = dict.fromkeys(made)
            if args.live_rounds > 0:
                task = progress.add_task("live, 2 s period", total=3)
                for name in ("host", "emulated", "nvml (fake)"):
                    live[name] = _live(made[name], args.live_rounds) * 1e6
                    progress.advance(task)
                    progress.refresh()
        for name, s in made.items():
            if name != "listeners":
                s.close()
        for name, rs in runs.items():
            cpu = statistics.median(x["cpu_per_device_sample_us"] for x in rs)
            out[name] = {
                "devices": rs[0]["devices"],
                "cpu_per_device_sample_us": cpu,
                "wall_per_device_sample_us": statistics.median(
                    x["wall_per_device_sample_us"] for x in rs
                ),
                "cpu_us_per_device_per_s": cpu / PERIOD_S,
                "live_cpu_us_per_device_per_s": live[name],
                "runs": rs,
            }
    return out


def recovery(args: argparse.Namespace, console: Console, work: Path) -> dict[str, Any]:
    """Part (b)."""
    policy = RemediationPolicy(defaults=KindPolicy(max_failures=1000, backoff_s=0.0))
    trials: list[dict[str, Any]] = []
    with LocalCluster(EMULATED, work / "recovery", policy=policy) as c:
        n = len(c.fabric.devices)
        c.submit(spin, 0.05, accelerators=f"any:{n}", name="warm").result(timeout=60)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())  # fmt: skip
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("fault -> running elsewhere", total=args.trials)
            for t in range(args.trials):
                job = c.submit(spin, 60.0, name=f"trial{t}", max_retries=1)
                _wait(lambda j=job: j.state is JobState.RUNNING, 60)  # type: ignore[misc]
                placement = job.record.placement
                assert placement is not None
                dev = placement.devices[0]
                c.inject(device=dev, kind="fail", note=f"trial {t}")
                found: list[Any] = []

                def recovered(jid: str = job.id, out: list[Any] = found) -> bool:
                    out[:] = [r for r in c.recoveries() if r.job == jid]
                    return bool(out)

                _wait(recovered, 60)
                job.cancel()
                job.wait(60)
                _wait(lambda: all(r.state == "ready" and r.phase == "healthy"
                                  for r in c.devices()), 120)  # fmt: skip
                r = found[0]
                trials.append({"trial": t, "device": dev, "to": list(r.devices),
                               "elsewhere": r.elsewhere, "seconds": r.seconds,
                               "placed_s": r.placed_at - r.fault_at,
                               "started_s": r.running_at - r.placed_at})  # fmt: skip
                progress.advance(task)
    secs = sorted(x["seconds"] for x in trials)
    return {
        "trials": trials,
        "median_s": statistics.median(secs),
        "p95_s": _pct(secs, 0.95),
        "min_s": secs[0],
        "max_s": secs[-1],
        "median_placed_s": statistics.median(x["placed_s"] for x in trials),
        "median_started_s": statistics.median(x["started_s"] for x in trials),
        "all_elsewhere": all(x["elsewhere"] for x in trials),
    }


def _pct(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``xs``."""
    k = max(0, min(len(xs) - 1, math.ceil(q * len(xs)) - 1))
    return xs[k]


def _wait(pred: Callable[[], object], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise TimeoutError("benchmark step did not finish in time")
        time.sleep(0.005)


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Both parts; the JSON-ready result."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="accelnet-device-bench-") as tmp:
        work = Path(tmp)
        sampled = sampling(args, console, work)
        recovered = recovery(args, console, work) if args.trials > 0 else None
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "schema": "accelnet.bench.device/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(sys.orig_argv),
        "parameters": {
            "calls": args.calls,
            "repeats": args.repeats,
            "period_s": PERIOD_S,
            "trials": args.trials,
            "live_rounds": args.live_rounds,
            "emulated_fabric": EMULATED,
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg": load,
        },
        "source": source_state(),
        "wall_s": time.perf_counter() - started,
        "sampling": sampled,
        "recovery": recovered,
    }


def report(result: dict[str, Any], console: Console) -> None:
    """Print both tables."""
    m, p = result["machine"], result["parameters"]
    caption = (f"{m['cpu_count']} cores, Python {m['python']}; src at "
               f"{src_label(result['source'])}; {result['wall_s']:.0f} s")  # fmt: skip
    table = Table(title=f"sampling overhead (medians of {p['repeats']} x {p['calls']} samples; "
                  f"at the {p['period_s']:g} s period)", caption=caption)  # fmt: skip
    for col in ("sampler", "devices", "CPU / device / sample", "wall / device / sample",
                "CPU / device / s", "live CPU / device / s"):  # fmt: skip
        table.add_column(col, justify="left" if col == "sampler" else "right")
    for name, s in result["sampling"].items():
        live = s["live_cpu_us_per_device_per_s"]
        table.add_row(name, str(s["devices"]), f"{s['cpu_per_device_sample_us']:.0f} µs",
                      f"{s['wall_per_device_sample_us']:.0f} µs",
                      f"{s['cpu_us_per_device_per_s']:.0f} µs/s",
                      "-" if live is None else f"{live:.0f} µs/s")  # fmt: skip
    console.print(table)
    rec = result["recovery"]
    if rec is None:
        return
    t = Table(title=f"injected fail -> job running on another device ({len(rec['trials'])} "
              f"trials, real workers, {p['emulated_fabric']})", caption=caption)  # fmt: skip
    for col in ("figure", "median", "p95", "min", "max"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    t.add_row("fault -> running", f"{rec['median_s'] * 1e3:.0f} ms", f"{rec['p95_s'] * 1e3:.0f} ms",
              f"{rec['min_s'] * 1e3:.0f} ms", f"{rec['max_s'] * 1e3:.0f} ms")  # fmt: skip
    t.add_row("  fault -> placed again", f"{rec['median_placed_s'] * 1e3:.0f} ms", "", "", "")
    t.add_row("  placed -> running", f"{rec['median_started_s'] * 1e3:.0f} ms", "", "", "")
    console.print(t)
    if not rec["all_elsewhere"]:
        console.print("[yellow]some trials ran again on the faulty device[/]")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200, help="samples per repeat")
    parser.add_argument("--repeats", type=int, default=5, help="repeats (medians over them)")
    parser.add_argument("--trials", type=int, default=20, help="fault trials (0: skip)")
    parser.add_argument("--live-rounds", type=int, default=5,
                        help="rounds at the real 2 s period per sampler (0: skip)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.repeats < 1 or args.trials < 0 or args.live_rounds < 0:
        parser.error("need --calls >= 1, --repeats >= 1, --trials >= 0, --live-rounds >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Measure, write the JSON, print the tables."""
    args = parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
