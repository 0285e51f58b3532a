"""A real collective benchmark: allreduce and allgather across one worker process per
device (gloo on CPU cores, NCCL on NVIDIA GPUs), ranks in the planned ring order, measured
like nccl-tests and shown beside the cost model's prediction; and the calibration of the
model's per-level latency and bandwidth from a ring allreduce sweep.

torch is imported lazily, in the workers (extra ``torch``). Typical use::

    from accelnet.comm import CostModel
    from accelnet.commbench import Settings, benchmark, make_steps, plan_bench
    from accelnet.commbench.affinity import physical_cores
    from accelnet.fabric.discovery import discover

    local = discover().fabric
    plan = plan_bench(local, ["cpu0", "cpu1"], local, physical_cores())
    rows = benchmark(plan, make_steps(["allreduce"], [1 << 10, 1 << 20], plan.ranks),
                     Settings(), CostModel())
"""

from accelnet.commbench.bench import benchmark, calibrate, calibration_steps
from accelnet.commbench.calibrate import RingFit, fit_ring_allreduce, ring_allreduce_time
from accelnet.commbench.errors import BenchError, BenchInputError
from accelnet.commbench.plan import BenchPlan, RankBinding, plan_bench
from accelnet.commbench.results import SCHEMA, Row, bench_json, summarize
from accelnet.commbench.runner import Measurement, Settings, make_steps, run_bench
from accelnet.commbench.sizes import parse_size, parse_sizes

__all__ = [
    "SCHEMA",
    "BenchError",
    "BenchInputError",
    "BenchPlan",
    "Measurement",
    "RankBinding",
    "RingFit",
    "Row",
    "Settings",
    "bench_json",
    "benchmark",
    "calibrate",
    "calibration_steps",
    "fit_ring_allreduce",
    "make_steps",
    "parse_size",
    "parse_sizes",
    "plan_bench",
    "ring_allreduce_time",
    "run_bench",
    "summarize",
]
