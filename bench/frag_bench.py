"""Fragmentation benchmark: a GPU-sharing cluster filled by FGD's method, and a churn mode.

**sharing** (default), after Weng et al., "Beware of Fragmentation" (USENIX ATC'23): a
synthetic workload resembling Alibaba's GPU-sharing trace (cluster-trace-gpu-v2023), on a
fabric of ``--hosts`` hosts (default 300; ``--hosts 1200`` is about the paper's size) drawn
from a host mix (``--host-mix``): 1-, 2-, 4- and 8-GPU hosts of T4, P100, V100 and A100
with 32 to 128 CPU cores and 128 to 1,024 GB, one leaf switch per 32 hosts. Jobs are drawn
i.i.d. from a job mix: a part CPU-only (cores and memory on one host), a part fractional
(0.1 to 0.9 of one GPU), a few multi-GPU jobs (2, 4 or 8 GPUs on one host,
``topology.required: host``), the rest one GPU; a part of the GPU jobs names one model
(drawn by the model's GPU count), the others take any GPU; each rank asks for CPU cores
and memory (GB per core) from the mix's distributions. Jobs arrive one by one until the GPU
demand that arrived (failed jobs included) is ``--arrive`` (130%) of the GPUs; none
leaves; each is placed at once with ``strategy.place`` or fails. Mixes (``--mixes``, all
by default): ``alibaba`` (the trace's kinds of job, no model named; cores plentiful: about
65% of them asked for at 100% arrived GPU demand), ``cpu-heavy`` (GPU jobs ask about 1.3x
the cores and 20% of the jobs are CPU-only: about 90% of the cores asked for at 100%, so
that cores are what strands GPUs) and ``gpuspec33`` (``alibaba`` with 33% of the GPU jobs
naming one model, as the trace's gpuspec33 variant). Figures per strategy, medians over
``--seeds`` seeds (the same jobs for every strategy): GPUs allocated (shares summed) and
unallocated (GPUs minus allocated) at 100% and 130% arrived demand, the arrived demand when
the first job failed, jobs failed, the median ``place()`` time, and the unallocated GPUs at
every 1% of arrived demand (the figure). Strategies: ``best-fit``, ``first-fit``,
``frag-aware``, ``fgd`` (the registry's) and two baselines defined here on
:class:`accelnet.sched.fgd.HostScoring` (one host per job, best fit beyond):
``dot-product`` (the host whose free (GPU, CPU, memory), each over the largest host's, has
the smallest dot product with the job's demand, as the FGD paper's baseline after Tetris)
and ``gpu-packing`` (a share on a partly used GPU first, then a host with a GPU in use,
then an idle host; CPU-only jobs by best fit on cores). A sanity check outside the timings
recounts every placement: no device over its share, no host over its declared CPU cores or
memory, the right number of devices of an allowed class on one host where required. Runs
go to ``--procs`` worker processes (default: the core count).

    .venv/bin/python bench/frag_bench.py [--hosts 300] [--seeds 10] [--mixes alibaba,...]

prints a table per mix and writes ``bench/results/frag_sharing.json`` and
``bench/results/frag_sharing.png``.

**churn** (``--mode churn``): best-fit, first-fit and frag-aware on one stream of jobs that
arrive and leave. The fabric is ``fat-tree:hosts=128,gpus_per_host=8`` (1,024 H100 GPUs;
one NVLink domain per host). For every seed a stream of ``--arrivals`` jobs is drawn once:
Poisson arrivals at the rate that offers ``--load`` (95%) of the GPUs, exponential run times
(mean 1 time unit), shapes drawn from the typical mix of :mod:`accelnet.sched.packing` by
its weights (30% ``0.25`` of a GPU, 20% ``0.5``, 25% 1 GPU, 10% 2 GPUs, 10% 4, 5% 8; gangs
of 2 or more ``topology.required: nvlink``, as data-parallel jobs ask). Each strategy plays
the *same* stream on its own empty :class:`CapacityIndex`: finished jobs give their devices
back, then the arrival is placed at once with ``strategy.place`` or **rejected** (there is
no queue, so the states of the strategies drift apart only by their choices). Figures,
after the first ``--warmup`` arrivals:

* **usable fraction**, sampled every ``--every`` arrivals and averaged over the samples:
  :func:`accelnet.sched.packing.usable_fraction`, the free capacity the typical mix can
  still use divided by the free capacity, each shape weighted by its weight. For one shape:
  (jobs of that shape that could still be placed, each shape alone, x its size) / free
  capacity, where a gang of ``c`` counts ``floor(wholly free / c)`` per NVLink domain and a
  share ``s`` counts ``floor(free share / s)`` per device. (frag-aware maximises this very
  quantity per placement, so the rejection counts below are the neutral check.)
* **failed despite capacity**: rejected arrivals for which the free capacity in total
  (free shares summed) was at least what the job asks (count x share): placements lost to
  fragmentation, not to a full fabric. Also all rejections, and the whole hosts free.
* **place() time** per arrival (``time.perf_counter_ns`` around the call alone; placed or
  not): median and p99 over the seed's arrivals.

Medians over ``--seeds`` seeds of every per-seed figure; strategies run interleaved (the
order rotates per seed). A sanity check outside the timings: every placement has the asked
number of distinct devices of the class, each with the share free, inside one NVLink
domain when required.

    .venv/bin/python bench/frag_bench.py --mode churn [--seeds 5] [--arrivals 100000]

prints a table and writes ``bench/results/frag.json`` (parameters, per-seed figures and
usable-fraction series, medians, the git commit and whether ``src/`` has changes).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import os
import platform
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accelnet.fabric import DomainLevel, Fabric, load_preset
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex, units
from accelnet.sched.fgd import HostScoring, HostTables, Need, Raw, Slots
from accelnet.sched.packing import TYPICAL_MIX, free_capacity, usable_fraction
from accelnet.sched.placement import PLACEMENTS, PlacementStrategy
from accelnet.sched.request import Request
from accelnet.sched.snapshot import Placement
from accelnet.sched.topology import Topology, cpu_units, memory_units
from benchutil import run_and_report, source_state, src_label

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SHARING_RESULTS = RESULTS_DIR / "frag_sharing.json"
PLOT = RESULTS_DIR / "frag_sharing.png"
SHARING_STRATEGIES = ("best-fit", "first-fit", "frag-aware", "dot-product", "gpu-packing", "fgd")
HOSTS_PER_LEAF = 32
FABRIC_SEED = 20230710  # the host order is drawn once, the same for every seed

Dist = tuple[tuple[float, float], ...]  # (value, weight)


@dataclass(frozen=True, slots=True)
class HostType:
    """Hosts of one kind: ``gpus`` x ``model``, CPU cores, memory (GB), how they are
    joined (``nvlink`` style of the fabric spec), and their part of the hosts (weight)."""

    model: str
    gpus: int
    cpus: float
    memory_gb: float
    weight: float
    nvlink: str = "none"


HOST_MIX: tuple[HostType, ...] = (
    HostType("T4", 1, 32.0, 128.0, 0.15),
    HostType("T4", 2, 48.0, 192.0, 0.15),
    HostType("P100", 2, 64.0, 256.0, 0.10),
    HostType("V100", 4, 64.0, 256.0, 0.15, "mesh"),
    HostType("V100", 8, 96.0, 384.0, 0.25, "cube-mesh"),
    HostType("A100-SXM4-80GB", 8, 128.0, 1024.0, 0.20, "nvswitch"),
)


@dataclass(frozen=True, slots=True)
class Mix:
    """A job mix: ``cpu_only`` of the jobs take no GPU; of the GPU jobs ``share`` take a
    share of one GPU (``shares``), ``multi`` (GPUs, part) take several on one host, the rest
    one GPU; ``constrained`` of the GPU jobs name one model. Cores per rank: ``share_cpus``,
    ``gpu_cpus`` (one whole GPU), ``multi_cpus`` (several), ``cpu_only_cpus``; memory:
    cores x ``gb_per_cpu``."""

    name: str
    cpu_only: float
    share: float
    shares: Dist
    multi: Dist
    constrained: float
    share_cpus: Dist
    gpu_cpus: Dist
    multi_cpus: Dist
    cpu_only_cpus: Dist
    gb_per_cpu: Dist


SHARES: Dist = ((0.1, 0.1), (0.2, 0.1), (0.25, 0.15), (0.3, 0.1), (0.4, 0.1), (0.5, 0.25),
                 (0.6, 0.05), (0.75, 0.1), (0.9, 0.05))  # fmt: skip
ALIBABA = Mix(
    "alibaba",
    cpu_only=0.12,
    share=0.40,
    shares=SHARES,
    multi=((2, 0.05), (4, 0.03), (8, 0.02)),
    constrained=0.0,
    share_cpus=((2, 0.3), (4, 0.4), (8, 0.3)),
    gpu_cpus=((4, 0.2), (8, 0.4), (12, 0.2), (16, 0.2)),
    multi_cpus=((4, 0.4), (8, 0.4), (11, 0.2)),
    cpu_only_cpus=((4, 0.3), (8, 0.3), (16, 0.25), (32, 0.15)),
    gb_per_cpu=((2, 0.3), (4, 0.5), (6, 0.2)),
)
CPU_HEAVY = replace(
    ALIBABA,
    name="cpu-heavy",
    cpu_only=0.20,
    share_cpus=((3, 0.3), (5, 0.4), (10, 0.3)),
    gpu_cpus=((5, 0.2), (10, 0.4), (16, 0.2), (20, 0.2)),
    multi_cpus=((6, 0.4), (10, 0.4), (12, 0.2)),
)
GPUSPEC33 = replace(ALIBABA, name="gpuspec33", constrained=0.33)
MIXES = {m.name: m for m in (ALIBABA, CPU_HEAVY, GPUSPEC33)}


@dataclass(frozen=True, slots=True)
class Job:
    """One job: ``count`` GPUs of ``share`` each (0: CPU-only), of ``model`` (None: any
    GPU), with ``cpus`` and ``memory_gb`` per rank."""

    count: int
    share: float
    model: str | None
    cpus: float
    memory_gb: float

    @property
    def demand(self) -> int:
        """GPU demand in share units."""
        return self.count * units(self.share)


def draw(rng: random.Random, dist: Dist) -> float:
    """One value of ``dist`` by its weights."""
    return rng.choices([v for v, _ in dist], weights=[w for _, w in dist])[0]


def sharing_fabric(hosts: int, mix: Sequence[HostType]) -> Fabric:
    """``hosts`` hosts of the host mix (counts by weight, largest remainders), in an order
    drawn once (:data:`FABRIC_SEED`), :data:`HOSTS_PER_LEAF` per leaf switch."""
    total = sum(t.weight for t in mix)
    exact = [hosts * t.weight / total for t in mix]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(mix)), key=lambda i: counts[i] - exact[i])[: hosts - sum(counts)]:
        counts[i] += 1
    kinds = [t for t, n in zip(mix, counts, strict=True) for _ in range(n)]
    random.Random(FABRIC_SEED).shuffle(kinds)
    leaves = (hosts + HOSTS_PER_LEAF - 1) // HOSTS_PER_LEAF
    spec = {
        "name": f"sharing-{hosts}",
        "switches": [{"name": f"leaf{j}", "kind": "leaf"} for j in range(leaves)],
        "hosts": [
            {
                "name": f"n{i:04d}",
                "devices": f"{t.gpus}x{t.model}",
                "nvlink": t.nvlink,
                "cpus": t.cpus,
                "memory_gb": t.memory_gb,
                "nics": "Eth-25G",
                "network": f"leaf{i // HOSTS_PER_LEAF}",
            }
            for i, t in enumerate(kinds)
        ],
    }
    return build_fabric(parse_spec(spec, "<frag_bench>"))


def make_jobs(mix: Mix, rng: random.Random, topo: Topology, arrive: float) -> list[Job]:
    """Jobs of ``mix`` until their GPU demand is ``arrive`` of the GPUs of ``topo``; a job
    that no host could hold even empty is drawn again (so the first failure is one of
    fragmentation or of a full fabric, not of an impossible job)."""
    gpus: dict[str, int] = {}
    most: dict[str, int] = {}
    kinds: set[tuple[str, int, int, int]] = set()  # (class, GPUs, CPU units, memory units)
    for host in topo.hosts:
        per: dict[str, int] = {}
        for d in topo.host_devices[host]:
            key = topo.class_of[d].key
            per[key] = per.get(key, 0) + 1
        for key, n in per.items():
            gpus[key] = gpus.get(key, 0) + n
            most[key] = max(most.get(key, 0), n)
            kinds.add((key, n, topo.host_cpu.get(host, 1 << 62), topo.host_mem.get(host, 1 << 62)))

    def fits(job: Job) -> bool:
        ranks = job.count or 1
        cpu, mem = cpu_units(job.cpus) * ranks, memory_units(job.memory_gb) * ranks
        return any(
            (job.model is None or key == job.model) and n >= job.count and c >= cpu and m >= mem
            for key, n, c, m in kinds
        )

    goal = arrive * sum(gpus.values()) * SHARE_UNITS
    multi = sum(w for _, w in mix.multi)
    out: list[Job] = []
    arrived = 0
    while arrived < goal - 1e-9:
        gb = draw(rng, mix.gb_per_cpu)
        r = rng.random()
        if rng.random() < mix.cpu_only:
            count, share, cpus = 0, 1.0, draw(rng, mix.cpu_only_cpus)
        elif r < mix.share:
            count, share, cpus = 1, draw(rng, mix.shares), draw(rng, mix.share_cpus)
        elif r < mix.share + multi:
            count, share, cpus = int(draw(rng, mix.multi)), 1.0, draw(rng, mix.multi_cpus)
        else:
            count, share, cpus = 1, 1.0, draw(rng, mix.gpu_cpus)
        model = None
        if count and rng.random() < mix.constrained:
            fit = {k: n for k, n in gpus.items() if most[k] >= count}
            model = rng.choices(list(fit), weights=list(fit.values()))[0]
        job = Job(count, share, model, cpus, cpus * gb)
        if fits(job):
            out.append(job)
            arrived += job.demand
    return out


def request(i: int, job: Job, topo: Topology) -> Request:
    """The placement request of job ``i``."""
    if not job.count:
        classes: tuple[Any, ...] = ()
    elif job.model is None:
        classes = tuple(topo.classes.values())
    else:
        classes = (topo.classes[job.model],)
    return Request(
        f"j{i}",
        classes,
        job.count,
        job.share,
        DomainLevel.HOST if job.count > 1 else None,
        None,
        cpus=job.cpus,
        memory_gb=job.memory_gb,
    )


class DotProduct(HostScoring):
    """The FGD paper's dot-product baseline (after Tetris): the host whose free (GPU
    units, CPU, memory), each over the largest host's, has the *smallest* dot product with
    the job's demand (same scale): the least free where the job needs most."""

    name = "dot-product"

    def hosts(self, topo: Topology) -> HostTables:
        """See :meth:`HostScoring.hosts`; also the largest host's capacities."""
        self._gpu = max(len(topo.host_devices[h]) for h in topo.hosts) * SHARE_UNITS
        self._cpu = max(topo.most_cpu, 1)
        self._mem = max(topo.most_mem, 1)
        return super().hosts(topo)

    def cost(self, slots: Slots, before: Raw, then: Raw, need: Need) -> float:
        """The dot product."""
        free = sum(f or 0 for f in before[1])
        cpu = self._cpu if before[2] is None else before[2]
        mem = self._mem if before[3] is None else before[3]
        return (
            need[1] * need[2] * free / self._gpu**2
            + need[4] * cpu / self._cpu**2
            + need[5] * mem / self._mem**2
        )


class GpuPacking(HostScoring):
    """The FGD paper's GPU-packing baseline: a share on a partly used GPU first (tier 0),
    then GPUs of a host with a GPU in use (1), then an idle host (2); CPU-only jobs all
    tie (0). Ties as :class:`HostScoring` breaks them (best fit)."""

    name = "gpu-packing"

    def cost(self, slots: Slots, before: Raw, then: Raw, need: Need) -> float:
        """The tier (see the class docstring)."""
        frees = before[1]
        if not need[1]:
            return 0
        taken = [p for p, (a, b) in enumerate(zip(frees, then[1], strict=True)) if a != b]
        if need[1] < SHARE_UNITS and any((frees[p] or 0) < SHARE_UNITS for p in taken):
            return 0
        return 1 if any(f != SHARE_UNITS for f in frees) else 2


def make_strategy(name: str) -> PlacementStrategy:
    """A fresh strategy (the registry's, or a baseline of this file)."""
    if name == "dot-product":
        return DotProduct()
    if name == "gpu-packing":
        return GpuPacking()
    return PLACEMENTS.create(name)


@lru_cache(maxsize=2)
def sharing_topology(hosts: int, host_mix: tuple[HostType, ...]) -> Topology:
    """The fabric of the sharing mode and its topology (built once per process)."""
    return Topology(sharing_fabric(hosts, host_mix))


def play_sharing(
    name: str, mix: Mix, hosts: int, host_mix: tuple[HostType, ...], seed: int, arrive: float
) -> dict[str, Any]:
    """One strategy on one seed's jobs: the figures of the module docstring."""
    topo = sharing_topology(hosts, host_mix)
    jobs = make_jobs(mix, random.Random(seed), topo, arrive)
    requests = [request(i, j, topo) for i, j in enumerate(jobs)]
    strategy = make_strategy(name)
    index = CapacityIndex(topo, dict.fromkeys(topo.class_of, 1.0))
    capacity = len(topo.class_of) * SHARE_UNITS
    cpu_capacity = sum(topo.host_cpu.values())
    grid = [capacity * p // 100 for p in range(1, round(arrive * 100) + 1)]
    clock = time.perf_counter_ns
    took: list[int] = []
    placed: list[tuple[Request, Placement]] = []
    series: list[float] = []
    arrived = allocated = cpu_arrived = failed = 0
    first_fail: float | None = None
    at_100: dict[str, float] = {}
    gc.collect()
    for job, req in zip(jobs, requests, strict=True):
        arrived += job.demand
        cpu_arrived += cpu_units(job.cpus) * (job.count or 1)
        start = clock()
        got = strategy.place(req, index)
        took.append(clock() - start)
        if got is None:
            failed += 1
            if first_fail is None:
                first_fail = arrived / capacity
        else:
            index.hold(got)  # ValueError if anything is over-committed
            placed.append((req, got))
            allocated += job.demand
        while len(series) < len(grid) and arrived >= grid[len(series)]:
            series.append((capacity - allocated) / SHARE_UNITS)
            if len(series) == 100:
                used_cpu = sum(topo.host_cpu.values()) - sum(index.cpu.values())
                at_100 = {"cpu_arrived": cpu_arrived / cpu_capacity,
                          "cpu_allocated": used_cpu / cpu_capacity,
                          "failed": failed}  # fmt: skip
    check_sharing(topo, placed)
    gpus = capacity / SHARE_UNITS
    return {
        "seed": seed,
        "jobs": len(jobs),
        "gpus": gpus,
        "allocated_100": gpus - series[99],
        "unallocated_100": series[99],
        "allocated_130": gpus - series[-1],
        "unallocated_130": series[-1],
        "first_fail_pct": None if first_fail is None else 100 * first_fail,
        "failed": failed,
        "failed_100": at_100["failed"],
        "cpu_arrived_100": at_100["cpu_arrived"],
        "cpu_allocated_100": at_100["cpu_allocated"],
        "place_median_us": statistics.median(took) / 1e3,
        "series": series,
    }


def check_sharing(topo: Topology, placed: Sequence[tuple[Request, Placement]]) -> None:
    """Recount every placement (raises AssertionError): no device over its share, no
    host over its declared CPU or memory, devices as asked, one host where required."""
    share: dict[str, int] = {}
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    for req, p in placed:
        want = 0 if req.cpu_only else 1 if req.share < 1 else req.count
        if len(set(p.devices)) != want or len(p.devices) != want:
            raise AssertionError(f"{req.job}: {len(p.devices)} devices for {req.what()}")
        if any(topo.class_of[d] not in req.classes for d in p.devices):
            raise AssertionError(f"{req.job}: a device of a class it did not ask for")
        if req.required is DomainLevel.HOST and len({topo.host_of[d] for d in p.devices}) > 1:
            raise AssertionError(f"{req.job}: spans hosts")
        for d in p.devices:
            share[d] = share.get(d, 0) + units(p.share)
        for host, cpus, gb in p.hosts:
            cpu[host] = cpu.get(host, 0) + cpu_units(cpus)
            mem[host] = mem.get(host, 0) + memory_units(gb)
    for d, used in share.items():
        if used > SHARE_UNITS:
            raise AssertionError(f"{d} over-committed: {used}/{SHARE_UNITS}")
    for host, used in cpu.items():
        if used > topo.host_cpu.get(host, used):
            raise AssertionError(f"{host}: {used} CPU units of {topo.host_cpu[host]}")
    for host, used in mem.items():
        if used > topo.host_mem.get(host, used):
            raise AssertionError(f"{host}: {used} MB of {topo.host_mem[host]}")


def run_sharing(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Sharing mode: every mix, seed and strategy (in worker processes); the JSON result."""
    source = source_state()
    mixes: list[Mix] = args.mixes
    host_mix = args.host_mix
    topo = sharing_topology(args.hosts, host_mix)
    tasks = [(s, m, seed) for m in mixes for seed in range(args.seed, args.seed + args.seeds)
             for s in args.strategies]  # fmt: skip
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        m.name: {s: [] for s in args.strategies} for m in mixes
    }
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    started = time.perf_counter()
    with (
        Progress(*columns, console=console, transient=True) as progress,
        ProcessPoolExecutor(max_workers=args.procs) as pool,
    ):
        bar = progress.add_task("mixes x seeds x strategies", total=len(tasks))
        futures = {
            pool.submit(play_sharing, s, m, args.hosts, host_mix, seed, args.arrive): (s, m)
            for s, m, seed in tasks
        }
        for future in as_completed(futures):
            s, m = futures[future]
            runs[m.name][s].append(future.result())
            progress.update(bar, advance=1, description=f"{m.name} {s}")
    for per in runs.values():
        for rows in per.values():
            rows.sort(key=lambda r: r["seed"])
    keys = ("allocated_100", "unallocated_100", "allocated_130", "unallocated_130",
            "first_fail_pct", "failed", "failed_100", "cpu_arrived_100", "cpu_allocated_100",
            "place_median_us")  # fmt: skip
    medians: dict[str, dict[str, dict[str, Any]]] = {}
    for mix, per in runs.items():
        medians[mix] = {}
        for s, rows in per.items():
            med: dict[str, Any] = {}
            for k in keys:
                xs = [r[k] for r in rows if r[k] is not None]
                med[k] = statistics.median(xs) if xs else None
            med["series"] = [statistics.median(col) for col in zip(*(r["series"] for r in rows),
                                                                     strict=True)]  # fmt: skip
            medians[mix][s] = med
    versus = {mix: versus_best_fit(per) for mix, per in runs.items() if "fgd" in per
              and "best-fit" in per}  # fmt: skip
    return {
        "schema": "accelnet.bench.frag_sharing/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(sys.orig_argv),
        "parameters": {
            "hosts": args.hosts,
            "gpus": len(topo.class_of),
            "cpus": sum(topo.host_cpu.values()) / 100,
            "host_mix": [asdict(t) for t in host_mix],
            "mixes": [asdict(m) for m in mixes],
            "arrive": args.arrive,
            "seeds": args.seeds,
            "first_seed": args.seed,
            "strategies": list(args.strategies),
            "procs": args.procs,
        },
        "machine": machine(),
        "source": source,
        "wall_s": time.perf_counter() - started,
        "medians": medians,
        "fgd_vs_best_fit": versus,
        "runs": runs,
    }


def versus_best_fit(per: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """fgd against best fit, paired by seed: the cut in unallocated GPUs at 100% arrived
    demand (of the medians, and per seed) and the seeds where fgd allocated less."""
    fgd, bf = per["fgd"], per["best-fit"]
    med_f = statistics.median(r["unallocated_100"] for r in fgd)
    med_b = statistics.median(r["unallocated_100"] for r in bf)
    per_seed = [1 - a["unallocated_100"] / b["unallocated_100"] if b["unallocated_100"] else 0.0
                for a, b in zip(fgd, bf, strict=True)]  # fmt: skip
    fewer = [a["seed"] for a, b in zip(fgd, bf, strict=True)
             if a["allocated_100"] < b["allocated_100"] - 1e-9
             or a["allocated_130"] < b["allocated_130"] - 1e-9]  # fmt: skip
    points = sum(
        1
        for a, b in zip(fgd, bf, strict=True)
        for x, y in zip(a["series"], b["series"], strict=True)
        if x > y + 1e-9
    )
    return {
        "unallocated_cut_100": 1 - med_f / med_b if med_b else 0.0,
        "unallocated_cut_100_per_seed": per_seed,
        "seeds_fgd_allocated_less": fewer,
        "grid_points_fgd_allocated_less": points,
    }


def machine() -> dict[str, Any]:
    """The machine's core count, Python and platform."""
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "accelnet": version("accelnet"),
    }


def plot_sharing(result: dict[str, Any], path: Path) -> None:
    """Unallocated GPUs against arrived demand, one panel per mix, a line per strategy."""
    from matplotlib.figure import Figure

    mixes = list(result["medians"])
    fig = Figure(figsize=(6.2 * len(mixes), 4.6))
    colors = [f"C{i}" for i in range(10)]
    p = result["parameters"]
    for i, mix in enumerate(mixes):
        ax = fig.add_subplot(1, len(mixes), i + 1)
        for j, (s, med) in enumerate(result["medians"][mix].items()):
            xs = list(range(1, len(med["series"]) + 1))
            ax.plot(xs, med["series"], "-", color=colors[j % 10], lw=2.2 if s == "fgd" else 1.2,
                    label=s)  # fmt: skip
        ax.axvline(100, color="grey", lw=0.8, ls=":")
        ax.set_xlim(50, len(xs))
        ax.set_yscale("log")
        ax.set_ylim(bottom=1, top=0.6 * p["gpus"])
        ax.set_xlabel("arrived GPU demand (% of GPUs)")
        ax.set_ylabel("unallocated GPUs (median over seeds)")
        ax.set_title(f"{mix}: {p['hosts']} hosts, {p['gpus']:,} GPUs, {p['seeds']} seeds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


Row = tuple[str, Callable[[dict[str, Any]], str]]


def figure_table(
    result: dict[str, Any], title: str, per: dict[str, dict[str, Any]], rows: Sequence[Row]
) -> Table:
    """A rich table with a column per strategy (``per``: its medians) and a row per figure,
    captioned with the run's seeds, machine, source and wall time."""
    p, m = result["parameters"], result["machine"]
    table = Table(
        title=title,
        caption=f"medians over {p['seeds']} seeds; {m['cpu_count']} cores, Python "
        f"{m['python']}; src at {src_label(result['source'])}; {result['wall_s']:.0f} s",
    )
    table.add_column("figure")
    for s in per:
        table.add_column(s, justify="right")
    for name, cell in rows:
        table.add_row(name, *(cell(per[s]) for s in per))
    return table


def report_sharing(result: dict[str, Any], console: Console) -> None:
    """Print the medians as one rich table per mix, and fgd against best fit."""
    p = result["parameters"]
    for mix, per in result["medians"].items():
        rows: tuple[Row, ...] = (
            ("GPUs allocated at 100%", lambda x: f"{x['allocated_100']:,.1f}"),
            ("GPUs unallocated at 100%", lambda x: f"{x['unallocated_100']:,.1f}"),
            ("GPUs allocated at 130%", lambda x: f"{x['allocated_130']:,.1f}"),
            ("GPUs unallocated at 130%", lambda x: f"{x['unallocated_130']:,.1f}"),
            ("first failure at arrived demand", lambda x: "none" if x["first_fail_pct"] is None
             else f"{x['first_fail_pct']:.1f}%"),
            ("jobs failed by 100% / 130%", lambda x: f"{x['failed_100']:,.0f} / "
             f"{x['failed']:,.0f}"),
            ("cores arrived / allocated at 100%", lambda x: f"{x['cpu_arrived_100']:.0%} / "
             f"{x['cpu_allocated_100']:.0%}"),
            ("place() median", lambda x: f"{x['place_median_us']:,.0f} µs"),
        )  # fmt: skip
        title = (f"{mix}: {p['hosts']} hosts, {p['gpus']:,} GPUs, {p['cpus']:,.0f} cores; "
                 f"jobs arrive until {p['arrive']:.0%} of the GPUs")  # fmt: skip
        console.print(figure_table(result, title, per, rows))
        v = result["fgd_vs_best_fit"].get(mix)
        if v is not None:
            seeds = " ".join(f"{-c:+.0%}" for c in v["unallocated_cut_100_per_seed"])
            console.print(
                f"{mix}: unallocated GPUs at 100%, fgd against best-fit: "
                f"{-v['unallocated_cut_100']:+.1%} (medians; per seed {seeds}); seeds where "
                f"fgd allocated less "
                f"at 100% or 130%: {v['seeds_fgd_allocated_less'] or 'none'}; grid points "
                f"(of all seeds) where it had fewer allocated: "
                f"{v['grid_points_fgd_allocated_less']}"
            )


CHURN_RESULTS = RESULTS_DIR / "frag.json"
PRESET = "fat-tree:hosts=128,gpus_per_host=8"
CHURN_STRATEGIES = ("best-fit", "first-fit", "frag-aware")


@dataclass(frozen=True, slots=True)
class Arrival:
    """One job of the stream: when it arrives, its shape (index into the mix), run time."""

    at: float
    shape: int
    runs: float


def make_stream(n: int, rng: random.Random, gpus: int, load: float) -> list[Arrival]:
    """``n`` arrivals offering ``load`` of ``gpus`` (mean run time 1)."""
    weights = [t.weight for t in TYPICAL_MIX]
    mean_gpus = sum(t.weight * t.count * t.share for t in TYPICAL_MIX) / sum(weights)
    rate = load * gpus / mean_gpus
    shapes = rng.choices(range(len(TYPICAL_MIX)), weights=weights, k=n)
    out: list[Arrival] = []
    now = 0.0
    for shape in shapes:
        now += rng.expovariate(rate)
        out.append(Arrival(now, shape, rng.expovariate(1.0)))
    return out


def make_requests(topo: Topology) -> list[Request]:
    """One placement request per shape of the mix (gangs of >= 2 require NVLink)."""
    classes = tuple(topo.classes.values())
    return [
        Request(
            f"shape{i}",
            classes,
            t.count,
            t.share,
            DomainLevel.NVLINK if t.count > 1 else None,
            None,
        )
        for i, t in enumerate(TYPICAL_MIX)
    ]


def hosts_whole(index: CapacityIndex) -> int:
    """Hosts whose every GPU is wholly free."""
    topo = index.topo
    return sum(
        1
        for node in topo.nodes_at[3]
        if sum(index.whole_free(c, node) for c in topo.classes) == len(topo.children[node])
    )


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def play_churn(
    strategy: PlacementStrategy,
    topo: Topology,
    stream: Sequence[Arrival],
    requests: Sequence[Request],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One strategy on one stream: the per-seed figures (see the module docstring)."""
    index = CapacityIndex(topo, dict.fromkeys(topo.class_of, 1.0))
    gpus = len(topo.class_of)
    leaving: list[tuple[float, int, tuple[str, ...], int]] = []
    clock = time.perf_counter_ns
    place_ns: list[int] = []
    samples: list[dict[str, float]] = []
    shapes = len(requests)
    rejected, despite, placed = [0] * shapes, [0] * shapes, [0] * shapes
    gc.collect()
    for i, a in enumerate(stream):
        while leaving and leaving[0][0] <= a.at:
            _, _, devs, used = heapq.heappop(leaving)
            for d in devs:
                index.reset(d, index.free.get(d, 0) + used, True)
        req = requests[a.shape]
        start = clock()
        got = strategy.place(req, index)
        took = clock() - start
        counted = i >= args.warmup
        if got is None:
            asked = req.count * req.share
            if counted:
                rejected[a.shape] += 1
                despite[a.shape] += free_capacity(index) >= asked - 1e-9
        else:
            used = units(got.share)
            check(req, got.devices, used, index)
            for d in got.devices:
                index.reset(d, index.free[d] - used, True)
            heapq.heappush(leaving, (a.at + a.runs, i, got.devices, used))
            placed[a.shape] += counted
        if counted:
            place_ns.append(took)
            if (i - args.warmup) % args.every == 0:
                free = free_capacity(index)
                samples.append(
                    {
                        "arrival": i,
                        "usable_fraction": usable_fraction(index),
                        "free_fraction": free / gpus,
                        "hosts_whole": hosts_whole(index),
                    }
                )
    return {
        "usable_fraction": statistics.fmean(s["usable_fraction"] for s in samples),
        "free_fraction": statistics.fmean(s["free_fraction"] for s in samples),
        "hosts_whole": statistics.fmean(s["hosts_whole"] for s in samples),
        "rejected": sum(rejected),
        "failed_despite_capacity": sum(despite),
        "placed": sum(placed),
        "per_shape": {
            f"{t.count}x{t.share:g}": {"placed": p, "rejected": r, "despite_capacity": d}
            for t, p, r, d in zip(TYPICAL_MIX, placed, rejected, despite, strict=True)
        },
        "place_median_us": percentile(place_ns, 50) / 1e3,
        "place_p99_us": percentile(place_ns, 99) / 1e3,
        "samples": samples,
    }


def check(req: Request, devices: tuple[str, ...], used: int, index: CapacityIndex) -> None:
    """Sanity check of one placement before it is applied (raises AssertionError)."""
    topo = index.topo
    want = 1 if req.share < 1 else req.count
    if len(devices) != want or len(set(devices)) != want:
        raise AssertionError(f"{len(devices)} devices for {req.what()}")
    for d in devices:
        if index.free.get(d, 0) < used or topo.class_of[d] not in req.classes:
            raise AssertionError(f"{d} cannot take {used}/{SHARE_UNITS} for {req.what()}")
    if req.required is not None and len({topo.domain_of[req.required][d] for d in devices}) > 1:
        raise AssertionError(f"{req.what()} spans {req.required.value} domains")


def run_churn(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Churn mode: every seed, every strategy; the JSON-ready result."""
    source = source_state()
    fabric = load_preset(PRESET)
    topo = Topology(fabric)
    requests = make_requests(topo)
    strategies = {s: PLACEMENTS.create(s) for s in CHURN_STRATEGIES}
    per_seed: dict[str, list[dict[str, Any]]] = {s: [] for s in CHURN_STRATEGIES}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    started = time.perf_counter()
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("seeds x strategies", total=args.seeds * len(CHURN_STRATEGIES))
        for k in range(args.seeds):
            seed = args.seed + k
            stream = make_stream(args.arrivals, random.Random(seed), len(fabric.devices), args.load)
            order = CHURN_STRATEGIES[k % 3 :] + CHURN_STRATEGIES[: k % 3]
            for s in order:
                per_seed[s].append(
                    {"seed": seed, **play_churn(strategies[s], topo, stream, requests, args)}
                )
                progress.advance(task)
    keys = (
        "usable_fraction",
        "free_fraction",
        "hosts_whole",
        "rejected",
        "failed_despite_capacity",
        "placed",
        "place_median_us",
        "place_p99_us",
    )
    medians = {
        s: {k: statistics.median(r[k] for r in per_seed[s]) for k in keys} for s in CHURN_STRATEGIES
    }
    # paired by seed (same stream): failed-despite-capacity minus best-fit's
    paired = {
        s: [
            a["failed_despite_capacity"] - b["failed_despite_capacity"]
            for a, b in zip(per_seed[s], per_seed["best-fit"], strict=True)
        ]
        for s in CHURN_STRATEGIES
        if s != "best-fit"
    }
    return {
        "schema": "accelnet.bench.frag/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(sys.orig_argv),
        "parameters": {
            "preset": PRESET,
            "gpus": len(fabric.devices),
            "seeds": args.seeds,
            "first_seed": args.seed,
            "arrivals": args.arrivals,
            "warmup": args.warmup,
            "every": args.every,
            "offered_load": args.load,
            "mix": [{"count": t.count, "share": t.share, "weight": t.weight} for t in TYPICAL_MIX],
            "required": "nvlink for gangs of 2 or more",
            "run_time": "exponential, mean 1",
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "accelnet": version("accelnet"),
        },
        "source": source,
        "wall_s": time.perf_counter() - started,
        "medians": medians,
        "failed_minus_best_fit_per_seed": paired,
        "per_seed": per_seed,
    }


def report_churn(result: dict[str, Any], console: Console) -> None:
    """Print the medians as a rich table."""
    p, med = result["parameters"], result["medians"]
    counted = p["arrivals"] - p["warmup"]
    rows: tuple[Row, ...] = (
        ("usable fraction of free capacity", lambda x: f"{x['usable_fraction']:.3f}"),
        ("failed despite free capacity", lambda x: f"{x['failed_despite_capacity']:,.0f}"),
        ("rejected (all)", lambda x: f"{x['rejected']:,.0f}"),
        ("placed", lambda x: f"{x['placed']:,.0f}"),
        ("free GPUs (mean)", lambda x: f"{x['free_fraction']:.1%}"),
        ("whole hosts free (mean)", lambda x: f"{x['hosts_whole']:.1f}"),
        ("place() median", lambda x: f"{x['place_median_us']:.1f} µs"),
        ("place() p99", lambda x: f"{x['place_p99_us']:.1f} µs"),
    )
    title = (f"fragmentation: {p['gpus']:,} GPUs ({p['preset']}), offered load "
             f"{p['offered_load']:.0%}, {counted:,} arrivals counted per seed")  # fmt: skip
    table = figure_table(result, title, {s: med[s] for s in CHURN_STRATEGIES}, rows)
    paired = result["failed_minus_best_fit_per_seed"]
    table.add_row(
        "  failed - best-fit's, per seed",
        "",
        *(" ".join(f"{d:+d}" for d in paired[s]) for s in CHURN_STRATEGIES[1:]),
    )
    console.print(table)


def parse_dist(text: str, what: str) -> Dist:
    """``value:weight,...`` as a distribution; argparse error text naming ``what``."""
    try:
        out = tuple((float(v), float(w)) for v, w in (x.split(":") for x in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: write value:weight,... not {text!r}") from None
    if not out or any(w < 0 for _, w in out) or sum(w for _, w in out) <= 0:
        raise argparse.ArgumentTypeError(f"{what}: weights must be >= 0, not all 0")
    return out


def parse_host_mix(text: str) -> tuple[HostType, ...]:
    """``model:gpus:cpus:memory_gb:weight[:nvlink],...`` as host types."""
    out = []
    for item in text.split(","):
        parts = item.split(":")
        try:
            if len(parts) not in (5, 6):
                raise ValueError
            nvlink = parts[5] if len(parts) == 6 else "none"
            out.append(HostType(parts[0], int(parts[1]), float(parts[2]), float(parts[3]),
                                float(parts[4]), nvlink))  # fmt: skip
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--host-mix item {item!r}: write model:gpus:cpus:memory_gb:weight[:nvlink]"
            ) from None
    return tuple(out)


def with_overrides(mix: Mix, args: argparse.Namespace) -> Mix:
    """``mix`` with the options given on the command line."""
    changes: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("cpu_only", "share", "constrained", "shares", "multi", "gb_per_cpu")
        if getattr(args, k) is not None
    }
    if args.cpu_scale != 1.0:
        scale = args.cpu_scale
        changes["share_cpus"] = tuple((c * scale, w) for c, w in mix.share_cpus)
        changes["gpu_cpus"] = tuple((c * scale, w) for c, w in mix.gpu_cpus)
        changes["multi_cpus"] = tuple((c * scale, w) for c, w in mix.multi_cpus)
    return replace(mix, **changes)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--mode", choices=("sharing", "churn"), default="sharing")
    parser.add_argument("--seeds", type=int, help="repeats, medians over them (10; churn 5)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--out", type=Path, help="where to write the JSON")
    sharing = parser.add_argument_group("sharing mode")
    sharing.add_argument("--hosts", type=int, default=300, help="hosts (1200: full size)")
    sharing.add_argument("--mixes", default=",".join(MIXES), help=f"of {', '.join(MIXES)}")
    sharing.add_argument("--strategies", default=",".join(SHARING_STRATEGIES))
    sharing.add_argument("--arrive", type=float, default=1.3, help="arrived GPU demand to stop")
    sharing.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="processes")
    sharing.add_argument("--plot", type=Path, default=PLOT, help="where to write the PNG")
    sharing.add_argument("--host-mix", type=parse_host_mix, default=HOST_MIX,
                         help="model:gpus:cpus:memory_gb:weight[:nvlink],...")  # fmt: skip
    sharing.add_argument("--cpu-only", type=float, help="part of jobs that are CPU-only")
    sharing.add_argument("--share", type=float, help="part of GPU jobs asking a share")
    sharing.add_argument("--constrained", type=float, help="part of GPU jobs naming a model")
    sharing.add_argument("--shares", type=lambda t: parse_dist(t, "--shares"),
                         help="share:weight,... e.g. 0.25:3,0.5:5,0.75:2")  # fmt: skip
    sharing.add_argument("--multi", type=lambda t: parse_dist(t, "--multi"),
                         help="GPUs:part of GPU jobs,... e.g. 2:0.05,4:0.03,8:0.02")  # fmt: skip
    sharing.add_argument("--cpu-scale", type=float, default=1.0,
                         help="multiply the cores GPU jobs ask for")  # fmt: skip
    sharing.add_argument("--gb-per-cpu", type=lambda t: parse_dist(t, "--gb-per-cpu"),
                         help="GB a job asks per core: GB:weight,... e.g. 2:3,4:5")  # fmt: skip
    churn = parser.add_argument_group("churn mode")
    churn.add_argument("--arrivals", type=int, default=100_000, help="jobs per stream")
    churn.add_argument("--warmup", type=int, default=2_000, help="arrivals not counted")
    churn.add_argument("--every", type=int, default=1_000, help="arrivals between samples")
    churn.add_argument("--load", type=float, default=0.95, help="offered load (of GPUs)")
    args = parser.parse_args(argv)
    if args.seeds is None:
        args.seeds = 10 if args.mode == "sharing" else 5
    if args.out is None:
        args.out = SHARING_RESULTS if args.mode == "sharing" else CHURN_RESULTS
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    if args.mode == "churn":
        if args.every < 1 or not 0 <= args.warmup < args.arrivals:
            parser.error("need --every >= 1 and 0 <= --warmup < --arrivals")
        if args.load <= 0:
            parser.error("--load must be > 0")
        return args
    check_sharing_args(parser, args)
    return args


def check_sharing_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Split the lists of the sharing mode; parser.error on a bad option."""
    args.mixes = [m.strip() for m in args.mixes.split(",")]
    args.strategies = [s.strip() for s in args.strategies.split(",")]
    bad = [m for m in args.mixes if m not in MIXES]
    if bad:
        parser.error(f"unknown mix {bad[0]!r}; known: {', '.join(MIXES)}")
    known = set(PLACEMENTS) | {"dot-product", "gpu-packing"}
    bad = [s for s in args.strategies if s not in known]
    if bad:
        parser.error(f"unknown strategy {bad[0]!r}; known: {', '.join(sorted(known))}")
    if args.hosts < 1 or args.procs < 1 or args.arrive < 1.0:
        parser.error("need --hosts >= 1, --procs >= 1 and --arrive >= 1")
    for name in ("cpu_only", "share", "constrained"):
        value = getattr(args, name)
        if value is not None and not 0 <= value <= 1:
            parser.error(f"--{name.replace('_', '-')} must be in [0, 1]")


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print the tables, write the JSON (and the PNG)."""
    args = parse_args(argv)
    if args.mode == "churn":
        run_and_report(args, run_churn, report_churn, args.out)
        return

    def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
        args.mixes = [with_overrides(MIXES[m], args) for m in args.mixes]
        result = run_sharing(args, console)
        plot_sharing(result, args.plot)
        console.print(f"wrote {args.plot}")
        return result

    run_and_report(args, run, report_sharing, args.out)


if __name__ == "__main__":
    main()
