"""Services (issue 24): accelnet's router and autoscaler against Ray Serve on this machine,
the same model (scikit-learn's logistic regression on the digits, ``GET /predict?index=k``)
and the same replica count, and heterogeneity-aware placement against speed-blind.

- **throughput**: one replica, closed-loop load at ``--levels`` requests in flight from a
  load generator in a process of its own (``bench/loadgen.py``), ``--seconds`` each, the
  two systems taking turns: requests/s, p50, p99; the most requests/s at a p99 under
  ``--p99-bound`` ms.
- **router overhead**: one request at a time straight to accelnet's replica and through its
  router, alternately: the p50 difference (goal < 1 ms).
- **scale-up**: one replica, a load step of ``--step-load`` requests in flight: seconds from
  the step to the second replica serving (accelnet: its router sends it requests; Ray Serve:
  its second replica RUNNING), autoscaling to one request in flight per replica. The model
  holds each request ``--step-hold-ms`` more on both sides (one at a time), so that the step
  keeps more than one request in flight on either system: with the bare digits model the
  load generator, not the replica, is the bottleneck and no load step happens.
- **power** (accelnet only, emulated ``mixed-lab``): two replicas under an open-loop load of
  ``--rate`` requests/s, placed by the autoscaler's model choice and by the scheduler's own
  (``choose_model=False``, blind to the service's speed): modelled energy per 1,000
  requests and p95 against the goal.

Run: ``.venv/bin/python bench/serve_bench.py`` (needs ``pip install "ray[serve]"``); writes
``bench/results/serve.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from accelnet.runtime.care.energy_book import energy_from_json
from accelnet.runtime.local.handoff import free_port
from accelnet.runtime.sdk import LocalCluster
from benchutil import run_and_report, source_state, src_label

OUT = Path(__file__).resolve().parent / "results" / "serve.json"
LOADGEN = Path(__file__).resolve().parent / "loadgen.py"
SERVICE = f"{sys.executable} -m accelnet.workloads.digits_service"


def load(url: str, concurrency: int, seconds: float, rate: float = 0.0) -> dict[str, Any]:
    """Run the load generator; its figures."""
    cmd = [sys.executable, str(LOADGEN), "--url", url, "--concurrency", str(concurrency),
           "--seconds", str(seconds), "--rate", str(rate)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120, check=True)
    raw = json.loads(done.stdout)
    ok = sorted(t for t, c in zip(raw["latency_s"], raw["codes"], strict=True) if c == 200)
    q = statistics.quantiles(ok, n=100) if len(ok) > 2 else [float("nan")] * 99
    return {"requests": len(raw["codes"]), "ok": len(ok), "rps": len(ok) / seconds,
            "p50_ms": 1e3 * q[49], "p99_ms": 1e3 * q[98], "p95_ms": 1e3 * q[94]}  # fmt: skip


def wait(check: Any, what: str, limit: float = 120.0) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > limit:
            raise RuntimeError(f"gave up waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - t0


# ----- Ray Serve -------------------------------------------------------------------------------
def ray_app(autoscale: bool, hold_ms: float = 0.0) -> Any:
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    options: dict[str, Any] = {"ray_actor_options": {"num_cpus": 0}, "max_ongoing_requests": 8}
    if autoscale:
        options["autoscaling_config"] = {"min_replicas": 1, "max_replicas": 2,
                                         "target_ongoing_requests": 1, "upscale_delay_s": 0.3,
                                         "downscale_delay_s": 60}  # fmt: skip
    else:
        options["num_replicas"] = 1

    @serve.deployment(**options)
    class Digits:
        def __init__(self) -> None:
            from sklearn.datasets import load_digits
            from sklearn.linear_model import LogisticRegression
            from sklearn.model_selection import train_test_split

            x, y = load_digits(return_X_y=True)
            xt, self.x_test, yt, _ = train_test_split(x, y, test_size=0.25, random_state=0,
                                                      stratify=y)  # fmt: skip
            self.clf = LogisticRegression(max_iter=300).fit(xt, yt)
            self.busy = asyncio.Lock()  # as digits_service: one request at a time

        async def __call__(self, request: Request) -> JSONResponse:
            k = int(request.query_params.get("index", "0")) % len(self.x_test)
            async with self.busy:
                digit = int(self.clf.predict(self.x_test[k : k + 1])[0])
                if hold_ms:
                    await asyncio.sleep(hold_ms / 1e3)
            return JSONResponse({"digit": digit, "version": "1"})

    return Digits.bind()


class RayServe:
    def __init__(self) -> None:
        import ray
        from ray import serve

        self.ray, self.serve = ray, serve
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1", logging_level="error")  # fmt: skip
        self.port = free_port() or 8000
        serve.start(http_options={"host": "127.0.0.1", "port": self.port})
        self.url = f"http://127.0.0.1:{self.port}"  # the app's route prefix is /predict

    def deploy(self, autoscale: bool, hold_ms: float = 0.0) -> None:
        self.serve.run(ray_app(autoscale, hold_ms), route_prefix="/predict", name="digits")
        wait(lambda: httpx.get(f"{self.url}/predict", timeout=5).status_code == 200, "Ray Serve")

    def running(self) -> int:
        st = self.serve.status().applications["digits"].deployments["Digits"]
        return int(st.replica_states.get("RUNNING", 0))

    def remove(self) -> None:
        self.serve.delete("digits")

    def close(self) -> None:
        self.serve.shutdown()
        self.ray.shutdown()


# ----- the measurements ------------------------------------------------------------------------
def one_replica_spec(**extra: Any) -> dict[str, Any]:
    return {"name": "digits", "run": SERVICE, "resources": {"accelerators": "any:1"},
            "replicas": {"min": 1, "max": 1}, "max_inflight": 64, **extra}  # fmt: skip


def measure(args: Any, console: Console) -> dict[str, Any]:
    levels = [int(x) for x in args.levels.split(",")]
    out: dict[str, Any] = {"throughput": {"accelnet": {}, "ray": {}}}
    rs = RayServe()
    try:
        with Progress(console=console, transient=True) as progress, \
                tempfile.TemporaryDirectory() as tmp, \
                LocalCluster(None, workdir=Path(tmp) / "work") as cluster:  # fmt: skip
            task = progress.add_task("throughput", total=len(levels) * 2 * args.repeats)
            svc = cluster.serve(one_replica_spec())
            wait(lambda: svc.ready_count() == 1, "accelnet's replica")
            rs.deploy(autoscale=False)
            for c in levels:
                for r in range(args.repeats):
                    pair = [("accelnet", svc.url), ("ray", rs.url)]
                    for name, url in pair if r % 2 == 0 else pair[::-1]:
                        got = load(url, c, args.seconds)
                        out["throughput"][name].setdefault(str(c), []).append(got)
                        progress.advance(task)
            # router overhead: one request at a time, straight and through the router
            replica = svc.router.replicas()[0].url
            straight, routed = [], []
            for _ in range(args.repeats):
                straight.append(load(replica, 1, args.seconds))
                routed.append(load(svc.url, 1, args.seconds))
            out["router"] = {"straight": straight, "routed": routed}
            svc.close()
            rs.remove()
            # scale-up after a load step
            ups: dict[str, list[float]] = {"accelnet": [], "ray": []}
            spec = one_replica_spec(run=f"{SERVICE} --hold-ms {args.step_hold_ms:g}",
                                    replicas={"min": 1, "max": 2},
                                    goal={"target_inflight": 1},
                                    scaling={"up_s": 0.3, "down_s": 60, "window_s": 2})  # fmt: skip
            task2 = progress.add_task("scale-up", total=args.repeats * 2)
            for _ in range(args.repeats):
                svc = cluster.serve(spec)
                wait(lambda s=svc: s.ready_count() == 1, "accelnet's replica")
                gen = subprocess.Popen([sys.executable, str(LOADGEN), "--url",
                                        svc.url, "--concurrency",
                                        str(args.step_load), "--seconds", "30"],
                                       stdout=subprocess.DEVNULL)  # fmt: skip
                ups["accelnet"].append(wait(lambda s=svc: s.ready_count() >= 2, "a second replica"))
                gen.kill()
                gen.wait()
                svc.close()
                progress.advance(task2)
                rs.deploy(autoscale=True, hold_ms=args.step_hold_ms)
                gen = subprocess.Popen([sys.executable, str(LOADGEN), "--url", rs.url,
                                        "--concurrency", str(args.step_load), "--seconds", "60"],
                                       stdout=subprocess.DEVNULL)  # fmt: skip
                ups["ray"].append(wait(lambda: rs.running() >= 2, "Ray's second replica"))
                gen.kill()
                gen.wait()
                rs.remove()
                progress.advance(task2)
            out["scale_up_s"] = ups
    finally:
        rs.close()
    out["power"] = measure_power(args, console)
    return out


def measure_power(args: Any, console: Console) -> dict[str, Any]:
    spec = {"name": "digits", "run": f"{SERVICE} --base-ms 20",
            "resources": {"accelerators": {"any_of": ["H100-SXM", "L4", "T4"], "count": 1}},
            "replicas": {"min": 2, "max": 2}, "goal": {"p95_ms": args.goal_ms},
            "max_inflight": 64}  # fmt: skip
    out: dict[str, Any] = {}
    for aware in (True, False):
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                with LocalCluster("mixed-lab", workdir=Path(tmp) / "work") as cluster:
                    svc = cluster.serve(spec, choose_model=aware)
                    wait(lambda s=svc: s.ready_count() == 2, "two replicas")
                    models = sorted(r.model for r in svc.router.replicas())
                    got = load(svc.url, 64, args.seconds, rate=args.rate)
                    jobs = [r["job"] for r in svc.replicas().values()]
                    svc.close()
                    for j in jobs:
                        cluster.wait_for(str(j), 60)
                    joules = 0.0
                    for j in jobs:
                        rec = cluster.job(str(j)).record
                        if rec.energy:
                            joules += energy_from_json(rec.energy).joules
                runs.append({**got, "models": models, "joules": joules,
                             "j_per_1000": 1000 * joules / max(1, got["ok"])})  # fmt: skip
        out["aware" if aware else "blind"] = runs
    return out


def run(args: Any, console: Console) -> dict[str, Any]:
    result = measure(args, console)
    return {"source": source_state(), "cpus": os.cpu_count(), "seconds": args.seconds,
            "repeats": args.repeats, "p99_bound_ms": args.p99_bound, "rate": args.rate,
            "goal_ms": args.goal_ms, **result}  # fmt: skip


def report(r: dict[str, Any], console: Console) -> None:
    med = statistics.median
    t = Table(title=f"one replica, closed loop ({src_label(r['source'])}; medians of "
                    f"{r['repeats']}, {r['seconds']:g} s each)")  # fmt: skip
    for col in ("in flight", "accelnet req/s", "p50", "p99", "Ray Serve req/s", "p50 ",
                "p99 ", "accelnet/Ray"):  # fmt: skip
        t.add_column(col, justify="right")
    best = {"accelnet": 0.0, "ray": 0.0}
    for c, runs in r["throughput"]["accelnet"].items():
        a, b = runs, r["throughput"]["ray"][c]
        ar, br = med(x["rps"] for x in a), med(x["rps"] for x in b)
        for name, rr, xs in (("accelnet", ar, a), ("ray", br, b)):
            if med(x["p99_ms"] for x in xs) <= r["p99_bound_ms"]:
                best[name] = max(best[name], rr)
        t.add_row(c, f"{ar:.0f}", f"{med(x['p50_ms'] for x in a):.1f} ms",
                  f"{med(x['p99_ms'] for x in a):.1f} ms", f"{br:.0f}",
                  f"{med(x['p50_ms'] for x in b):.1f} ms", f"{med(x['p99_ms'] for x in b):.1f} ms",
                  f"{ar / br:.2f}x")  # fmt: skip
    console.print(t)
    bound = r["p99_bound_ms"]
    console.print(f"most req/s at p99 <= {bound:g} ms: accelnet {best['accelnet']:.0f}, "
                  f"Ray Serve {best['ray']:.0f}")  # fmt: skip
    s = med(x["p50_ms"] for x in r["router"]["straight"])
    v = med(x["p50_ms"] for x in r["router"]["routed"])
    console.print(f"router overhead, one request at a time: p50 {s:.2f} ms straight, {v:.2f} ms "
                  f"through the router: +{v - s:.2f} ms")  # fmt: skip
    ups = r["scale_up_s"]
    console.print(f"load step to a second replica serving: accelnet {med(ups['accelnet']):.1f} s "
                  f"{[round(x, 1) for x in ups['accelnet']]}, Ray Serve {med(ups['ray']):.1f} s "
                  f"{[round(x, 1) for x in ups['ray']]}")  # fmt: skip
    for k in ("aware", "blind"):
        runs = r["power"][k]
        j = med(x["j_per_1000"] for x in runs)
        p95, rps = med(x["p95_ms"] for x in runs), med(x["rps"] for x in runs)
        console.print(f"{k}: {runs[0]['models']}, {j:.0f} J per 1,000 requests, p95 "
                      f"{p95:.1f} ms (goal {r['goal_ms']:g}), {rps:.0f} req/s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--p99-bound", type=float, default=100.0)
    ap.add_argument("--step-load", type=int, default=4)
    ap.add_argument(
        "--step-hold-ms",
        type=float,
        default=10.0,
        help="the model's time per request in the load step (both sides)",
    )
    ap.add_argument("--rate", type=float, default=40.0)
    ap.add_argument("--goal-ms", type=float, default=250.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
