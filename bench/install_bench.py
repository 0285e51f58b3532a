"""Install size and time (issue 26 item 10): the base package against its extras.

For each of ``--variants`` (``base``: ``pip install <checkout>``; ``server``: with
``[server]``, ...), a fresh virtual environment is made and the checkout installed into it
(not editable: what a user's ``pip install accelnet`` gets); the figures are pip's wall time
and the size of the environment's ``site-packages`` (MB), with the number of distributions
installed. pip's own cache is used as it is (``--cache`` shows whether it was warm: the
first run of a day downloads, later ones do not); each variant runs ``--repeats`` times and
the median is kept. A final check runs ``accelnet --help`` and imports ``accelnet.client``
in the base environment (the base install works on its own).

Run from the project root::

    .venv/bin/python bench/install_bench.py [--variants base,server,sim,demo] [--repeats 1]

It prints a table and writes ``bench/results/install.json``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from benchutil import run_and_report, source_state, src_label

ROOT = Path(__file__).resolve().parent
PROJECT = ROOT.parent
RESULTS = ROOT / "results" / "install.json"


def folder_mb(path: Path) -> float:
    """Bytes of the files under ``path``, in MB."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def install(variant: str, tmp: Path) -> dict[str, Any]:
    """A fresh venv with the checkout installed as ``variant``: wall s, MB, distributions."""
    venv = tmp / f"venv-{variant}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    target = str(PROJECT) if variant == "base" else f"{PROJECT}[{variant}]"
    t0 = time.perf_counter()
    done = subprocess.run([str(py), "-m", "pip", "install", "-q", target],
                          capture_output=True, text=True, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"pip install {target}: {done.stderr[-1500:]}")
    site = next((venv / "lib").glob("python3*/site-packages"))
    dists = len(list(site.glob("*.dist-info")))
    out: dict[str, Any] = {"wall_s": wall, "site_packages_mb": folder_mb(site),
                           "distributions": dists}  # fmt: skip
    if variant == "base":
        check = subprocess.run([str(venv / "bin" / "accelnet"), "--help"], capture_output=True,
                               text=True, check=False)  # fmt: skip
        imp = subprocess.run([str(py), "-c", "import accelnet.client, accelnet.runtime.sdk"],
                             capture_output=True, text=True, check=False)  # fmt: skip
        out["help_ok"] = check.returncode == 0
        out["client_and_runtime_import_ok"] = imp.returncode == 0
    return out


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    rows: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="accelnet-install-") as tmp_s,
        Progress(console=console, transient=True) as progress,
    ):
        task = progress.add_task("installs", total=len(variants) * args.repeats)
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for i in range(args.repeats):
            for v in variants:
                progress.update(task, description=f"{v}, run {i + 1}")
                runs[v].append(install(v, Path(tmp_s) / f"r{i}"))
                progress.advance(task)
    for v, rs in runs.items():
        rows[v] = {
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "site_packages_mb": statistics.median(r["site_packages_mb"] for r in rs),
            "distributions": rs[0]["distributions"],
            "runs": rs,
        }
    return {
        "schema": "accelnet.bench.install/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/install_bench.py " + shlex.join(sys.argv[1:]),
        "python": sys.version.split()[0],
        "repeats": args.repeats,
        "source": source_state(),
        "variants": rows,
    }


def report(result: dict[str, Any], console: Console) -> None:
    t = Table(title=f"pip install of the checkout into a fresh venv (median of "
                    f"{result['repeats']})")  # fmt: skip
    for col in ("install", "pip wall (s)", "site-packages (MB)", "distributions"):
        t.add_column(col, justify="right" if col != "install" else "left")
    for v, r in result["variants"].items():
        name = "accelnet" if v == "base" else escape(f"accelnet[{v}]")
        t.add_row(name, f"{r['wall_s']:.1f}", f"{r['site_packages_mb']:.0f}",
                  str(r["distributions"]))  # fmt: skip
    console.print(t)
    base = result["variants"].get("base", {}).get("runs", [{}])[0]
    if base:
        console.print(f"base install: accelnet --help ok: {base.get('help_ok')}; client and "
                      f"runtime import: {base.get('client_and_runtime_import_ok')}")  # fmt: skip
    console.print(f"src {src_label(result['source'])}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="base,server,sim,demo")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
