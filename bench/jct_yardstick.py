"""A clairvoyant yardstick for average JCT on Gavel's traces: the best preemptive priority
schedule that a local search finds knowing every arrival and every job's work in advance.

The LP bound (:func:`accelnet.sim.bounds.jct_lp`) is a relaxation that no schedule reaches;
this gives the other side of the gap: real schedules, found offline, that an online policy
would have to match to reach a target. Schedules here are *easier* than the simulator's:

- event-driven: at every arrival and every completion the jobs present are taken in one
  fixed priority order, and each takes the first model of its own preference list with
  room for its whole gang (one model, any devices), or waits;
- preemption and migration cost nothing and happen at any event (no 360 s rounds);
- a gang runs at Gavel's measured rate for that model (as Gavel: no spread penalty);
- no packing of two jobs on the same devices.

Simulated annealing searches the priority order and the preference lists (moves: swap two
jobs, move one, give one a new preference list: any order of any non-empty subset of its
usable models), from the heterogeneity-aware SRPT order (time alone on the fastest model times gang
size). It minimises the average JCT, a makespan above ``--makespan`` counting as infeasible.
Each seed is one independent search; the best and the median over seeds are reported.

Run from the project root (needs ``../shared/data``)::

    .venv/bin/python bench/jct_yardstick.py [--trace max_min_fairness.trace] [--seeds 4]
        [--steps 150000]

It prints a table and writes ``bench/results/jct_yardstick.json``. About 8 minutes on 2
cores at the defaults (4 seeds of 150,000 steps, two at a time).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shlex
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accelnet.fabric import load_fabric
from accelnet.sim.bounds import jct_lp
from accelnet.sim.policies import model_rates
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.traces import load_trace
from benchutil import run_and_report, source_state

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "gavel" / "traces"
RESULTS = ROOT / "bench" / "results" / "jct_yardstick.json"
POLICIES = ROOT / "bench" / "results" / "policies.json"
GAVEL_JCT = {"max_min_fairness.trace": 14623.0}  # max_min_fairness_perf, ../shared/data
GAVEL_MAKESPAN = {"max_min_fairness.trace": 63945.0, "minimize_makespan.trace": 64721.0}
CHUNK = 5000  # search steps between progress reports


@dataclass(frozen=True)
class Instance:
    """Jobs (arrival, work, gang, rate per model) and the devices per model."""

    arrival: tuple[float, ...]
    work: tuple[float, ...]
    gang: tuple[int, ...]
    rate: tuple[dict[str, float], ...]
    capacity: dict[str, int]

    @property
    def n(self) -> int:
        return len(self.arrival)

    def models(self, i: int) -> tuple[str, ...]:
        """Job ``i``'s usable models (room for its gang, a positive rate), fastest first."""
        fit = [
            m for m, r in self.rate[i].items() if r > 0 and self.capacity.get(m, 0) >= self.gang[i]
        ]
        return tuple(sorted(fit, key=lambda m: (-self.rate[i][m], m)))

    def alone(self, i: int) -> float:
        """Job ``i``'s time on its fastest model."""
        return self.work[i] / self.rate[i][self.models(i)[0]]


def gavel_instance(trace: Path, fabric: str = "gavel-48") -> Instance:
    """A Gavel trace on a fabric preset with Gavel's throughputs (no spread penalty)."""
    model = ThroughputModel.gavel()
    jobs, _ = load_trace(str(trace), model, 0)
    capacity: dict[str, int] = {}
    for d in load_fabric(fabric).devices.values():
        capacity[d.model.name] = capacity.get(d.model.name, 0) + 1
    rates = model_rates(model)
    return Instance(
        tuple(j.arrival for j in jobs),
        tuple(j.work for j in jobs),
        tuple(j.gpus for j in jobs),
        tuple({m: rates(j.spec(), m, j.gpus) for m in sorted(capacity)} for j in jobs),
        capacity,
    )


def schedule(inst: Instance, prio: Sequence[int], pref: Sequence[Sequence[str]]) -> list[float]:
    """Every job's completion time under the priority order ``prio`` (job indices, first
    served first) and the preference lists ``pref`` (per job: the models it will run on,
    in order). Each list must hold at least one of the job's usable models."""
    rank = {j: k for k, j in enumerate(prio)}
    if sorted(rank) != list(range(inst.n)):
        raise ValueError("prio must order every job exactly once")
    for i, models in enumerate(pref):
        if not set(models) & set(inst.models(i)):
            raise ValueError(f"job {i}: preference {tuple(models)} has no usable model")
    order = sorted(range(inst.n), key=lambda i: (inst.arrival[i], i))
    left = list(inst.work)
    done = [math.inf] * inst.n
    active: list[int] = []
    t, nxt = inst.arrival[order[0]], 0
    while nxt < inst.n or active:
        while nxt < inst.n and inst.arrival[order[nxt]] <= t:
            active.append(order[nxt])
            nxt += 1
        active.sort(key=rank.__getitem__)
        free = dict(inst.capacity)
        running: dict[int, float] = {}
        for i in active:
            for m in pref[i]:
                if free.get(m, 0) >= inst.gang[i] and inst.rate[i].get(m, 0.0) > 0:
                    free[m] -= inst.gang[i]
                    running[i] = inst.rate[i][m]
                    break
        step = inst.arrival[order[nxt]] - t if nxt < inst.n else math.inf
        for i, r in running.items():
            step = min(step, left[i] / r)
        t += step
        for i, r in running.items():
            left[i] -= r * step
            if left[i] <= 1e-9 * inst.work[i]:
                done[i] = t
                active.remove(i)
    return done


@dataclass(frozen=True)
class Score:
    """A schedule's average JCT and makespan, and the search's cost of it."""

    avg_jct_s: float
    makespan_s: float
    cost: float


def score(
    inst: Instance, prio: Sequence[int], pref: Sequence[Sequence[str]], limit: float
) -> Score:
    """:func:`schedule`'s figures; a makespan over ``limit`` costs far more than any JCT."""
    done = schedule(inst, prio, pref)
    jct = sum(c - a for c, a in zip(done, inst.arrival, strict=True)) / inst.n
    span = max(done) - min(inst.arrival)
    over = span - limit
    return Score(jct, span, jct if over <= 0 else jct + 10 * (1000 + over))


@dataclass(frozen=True)
class Search:
    """One annealing run's state, handed between processes chunk by chunk."""

    seed: int
    step: int
    prio: tuple[int, ...]
    pref: tuple[tuple[str, ...], ...]
    cur: Score
    best_prio: tuple[int, ...]
    best_pref: tuple[tuple[str, ...], ...]
    best: Score
    rng: Any


def start(inst: Instance, seed: int, limit: float) -> Search:
    """The heterogeneity-aware SRPT start: shortest (time alone x gang) first, fastest
    model first."""
    prio = tuple(sorted(range(inst.n), key=lambda i: (inst.alone(i) * inst.gang[i], i)))
    pref = tuple(inst.models(i) for i in range(inst.n))
    s = score(inst, prio, pref, limit)
    return Search(seed, 0, prio, pref, s, prio, pref, s, random.Random(seed).getstate())


def anneal(
    inst: Instance, state: Search, steps: int, total: int, t0: float, limit: float
) -> Search:
    """``steps`` more steps of simulated annealing (temperature from ``t0`` s down to 1 s
    over ``total`` steps)."""
    rng = random.Random()
    rng.setstate(state.rng)
    choices = [
        [
            p
            for k in range(1, len(inst.models(i)) + 1)
            for p in itertools.permutations(inst.models(i), k)
        ]
        for i in range(inst.n)
    ]
    prio, pref, cur = list(state.prio), list(state.pref), state.cur
    best_prio, best_pref, best = state.best_prio, state.best_pref, state.best
    for s in range(state.step, state.step + steps):
        temp = t0 * (1 - s / total) + 1.0
        p, f = prio[:], pref[:]
        move = rng.random()
        if move < 0.4:
            a, b = rng.randrange(inst.n), rng.randrange(inst.n)
            p[a], p[b] = p[b], p[a]
        elif move < 0.8:
            p.insert(rng.randrange(inst.n), p.pop(rng.randrange(inst.n)))
        else:
            i = rng.randrange(inst.n)
            f[i] = rng.choice(choices[i])
        c = score(inst, p, f, limit)
        if c.cost < cur.cost or rng.random() < math.exp((cur.cost - c.cost) / temp):
            prio, pref, cur = p, f, c
            if c.cost < best.cost:
                best_prio, best_pref, best = tuple(p), tuple(f), c
    return replace(
        state,
        step=state.step + steps,
        prio=tuple(prio),
        pref=tuple(pref),
        cur=cur,
        best_prio=best_prio,
        best_pref=best_pref,
        best=best,
        rng=rng.getstate(),
    )


def search(
    inst: Instance, seeds: Sequence[int], steps: int, t0: float, limit: float, console: Console
) -> list[Search]:
    """One annealing run per seed, in parallel processes, with a progress bar."""
    states = {seed: start(inst, seed, limit) for seed in seeds}
    workers = max(1, min(len(seeds), os.cpu_count() or 1))
    with (
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress,  # fmt: skip
        ProcessPoolExecutor(workers) as pool,
    ):
        task = progress.add_task("annealing steps", total=steps * len(seeds))
        pending: dict[Future[Search], int] = {}

        def submit(seed: int) -> None:
            state = states[seed]
            if state.step < steps:
                n = min(CHUNK, steps - state.step)
                pending[pool.submit(anneal, inst, state, n, steps, t0, limit)] = seed

        for seed in seeds:
            submit(seed)
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                seed = pending.pop(fut)
                old = states[seed].step
                states[seed] = fut.result()
                progress.advance(task, states[seed].step - old)
                fit = [s.best.avg_jct_s for s in states.values() if s.best.makespan_s <= limit]
                best = f"best {min(fit):,.0f} s" if fit else "none within the makespan yet"
                progress.update(task, description=f"annealing steps ({best})")
                submit(seed)
    return [states[s] for s in seeds]


def online_best(trace: str, limit: float) -> dict[str, Any] | None:
    """Our best online policy on ``trace`` as Gavel with a makespan within ``limit``, from
    the last policy bench run."""
    if not POLICIES.exists():
        return None
    runs = json.loads(POLICIES.read_text())["gavel_traces"].get(trace, {}).get("as Gavel", {})
    fit = {p: r for p, r in runs.items() if r["makespan_s"] <= limit}
    if not fit:
        return None
    policy = min(fit, key=lambda p: fit[p]["avg_jct_s"])
    return {"policy": policy, **{k: fit[policy][k] for k in ("avg_jct_s", "makespan_s")}}


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    path = TRACES / args.trace
    if not path.exists():
        sys.exit(f"{path} is missing: the yardstick needs Gavel's traces")
    limit = args.makespan if args.makespan is not None else GAVEL_MAKESPAN.get(args.trace, math.inf)
    inst = gavel_instance(path)
    seeds = list(range(args.seeds))
    heuristic = start(inst, 0, limit).best
    with console.status("the JCT LP bound (60 s intervals)"):
        model = ThroughputModel.gavel()
        jobs, _ = load_trace(str(path), model, 0)
        bound = jct_lp(load_fabric("gavel-48"), jobs, model_rates(model), 60.0, 2_000_000)
    found = search(inst, seeds, args.steps, args.t0, limit, console)
    feasible = [s.best.avg_jct_s for s in found if s.best.makespan_s <= limit]
    return {
        "schema": "accelnet.bench.jct-yardstick/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": ".venv/bin/python bench/jct_yardstick.py " + shlex.join(sys.argv[1:]),
        "source": source_state(),
        "trace": args.trace,
        "jobs": inst.n,
        "makespan_limit_s": limit,
        "steps_per_seed": args.steps,
        "t0_s": args.t0,
        "gavel_avg_jct_s": GAVEL_JCT.get(args.trace),
        "target_avg_jct_s": GAVEL_JCT[args.trace] / 1.3 if args.trace in GAVEL_JCT else None,
        "jct_lp_avg_s": bound,
        "srpt_start": {"avg_jct_s": heuristic.avg_jct_s, "makespan_s": heuristic.makespan_s},
        "online_best": online_best(args.trace, limit),
        "seeds": [
            {
                "seed": s.seed,
                "avg_jct_s": s.best.avg_jct_s,
                "makespan_s": s.best.makespan_s,
                "prio": list(s.best_prio),
                "pref": [list(p) for p in s.best_pref],
            }
            for s in found
        ],
        "best_avg_jct_s": min(feasible) if feasible else None,
        "median_avg_jct_s": statistics.median(feasible) if feasible else None,
    }


def report(result: dict[str, Any], console: Console) -> None:
    t = Table(title=f"gavel-48, {result['trace']}: average JCT, makespan at most "
                    f"{result['makespan_limit_s']:,.0f} s")  # fmt: skip
    t.add_column("schedule")
    t.add_column("avg JCT (s)", justify="right")
    t.add_column("makespan (s)", justify="right")
    if result["gavel_avg_jct_s"]:
        t.add_row("Gavel max_min_fairness_perf", f"{result['gavel_avg_jct_s']:,.0f}",
                  f"{GAVEL_MAKESPAN[result['trace']]:,.0f}")  # fmt: skip
        t.add_row("target (1.3x below Gavel)", f"{result['target_avg_jct_s']:,.0f}", "")
    online = result["online_best"]
    if online:
        t.add_row(f"online: {online['policy']} (policies.json)", f"{online['avg_jct_s']:,.0f}",
                  f"{online['makespan_s']:,.0f}")  # fmt: skip
    start_ = result["srpt_start"]
    t.add_row("clairvoyant SRPT x gang (the start)", f"{start_['avg_jct_s']:,.0f}",
              f"{start_['makespan_s']:,.0f}")  # fmt: skip
    for s in result["seeds"]:
        t.add_row(f"clairvoyant search, seed {s['seed']}", f"{s['avg_jct_s']:,.0f}",
                  f"{s['makespan_s']:,.0f}")  # fmt: skip
    if result["best_avg_jct_s"] is not None:
        t.add_row("clairvoyant search, best", f"{result['best_avg_jct_s']:,.0f}", "")
        t.add_row("clairvoyant search, median", f"{result['median_avg_jct_s']:,.0f}", "")
    if result["jct_lp_avg_s"] is not None:
        t.add_row("LP lower bound (60 s intervals)", f"{result['jct_lp_avg_s']:,.0f}", "")
    console.print(t)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default="max_min_fairness.trace")
    parser.add_argument("--seeds", type=int, default=4, help="independent searches")
    parser.add_argument("--steps", type=int, default=150_000, help="annealing steps per seed")
    parser.add_argument("--t0", type=float, default=5.0, help="starting temperature, s of JCT")
    parser.add_argument("--makespan", type=float, help="makespan limit, s (default: Gavel's)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
