"""Regenerate ``src/accelnet/sim/data/gavel_throughputs.json`` from Gavel's measured table.

Keeps the ``"null"`` entries of ``simulation_throughputs.json`` (each job type alone on its
GPUs), at full precision, zeros included (the loader treats them as not measured), and the
co-location pairs that fit, as fractions of each job's rate alone
(:mod:`accelnet.sim.colocation`):

    .venv/bin/python bench/make_gavel_table.py [path/to/simulation_throughputs.json]
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path

from accelnet.sim.colocation import pairs_from_gavel

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json"
TARGET = ROOT / "src" / "accelnet" / "sim" / "data" / "gavel_throughputs.json"


def main(argv: list[str]) -> int:
    """Read Gavel's file, write the compact copy, print what was written."""
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    raw = source.read_bytes()
    table = json.loads(raw)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for worker_type, entries in table.items():
        rows: dict[str, dict[str, float]] = {}
        for key, value in entries.items():
            job_type, scale = ast.literal_eval(key)
            rows.setdefault(job_type, {})[str(int(scale))] = float(value["null"])
        out[worker_type] = {
            jt: dict(sorted(r.items(), key=lambda kv: int(kv[0]))) for jt, r in sorted(rows.items())
        }
    doc = {
        "source": (
            "stanford-futuredata/gavel, scheduler/simulation_throughputs.json: the 'null' "
            "entries (each job type alone), steps/s of the whole gang by worker type, job "
            "type and scale factor (GPUs); 'colocated': for pairs of job types that fit "
            "on the same GPUs together, the fraction of its rate alone each keeps. MIT "
            "licence, see LICENSE-gavel."
        ),
        "source_sha256": hashlib.sha256(raw).hexdigest(),
        "worker_types": dict(sorted(out.items())),
        "colocated": pairs_from_gavel(table, str(source)).to_compact(),
    }
    TARGET.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    count = sum(len(r) for rows in out.values() for r in rows.values())
    print(f"wrote {TARGET} ({count} rates, {len(out)} worker types)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
