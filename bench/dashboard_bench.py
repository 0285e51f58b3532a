"""The dashboard's first render at scale (issue 26 item 6): a real ``accelnet serve`` of a
``--gpus``-GPU fat tree (8 GPUs a host), the system Chromium under Playwright.

Each repeat opens a fresh page (no cache), signs in, and times from the click on "Sign in"
until the overview is painted: the compact view's cells coloured (or, below 128 devices,
the map's) and the device table filled. Then, on the same page, the full map drawn on demand
(the "full map" button until every device is drawn and coloured). Figures: medians of
``--repeats``, with the page's height (the overview should be about a viewport: 900 px
here) and the number of DOM elements.

Run from the project root (machine idle; needs Debian's chromium and playwright)::

    .venv/bin/python bench/dashboard_bench.py [--gpus 2048] [--repeats 5]

It prints a table and writes ``bench/results/dashboard.json``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from api_bench import token as api_token
from benchutil import run_and_report, source_state, src_label
from serveproc import ServeProcess

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "dashboard.json"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
PAINTED = """() => {
  const cells = document.querySelectorAll('#fabric-heatmap rect.hm-dev[fill]');
  const nodes = document.querySelectorAll('#fabric-map g.device rect[fill]');
  const rows = document.querySelectorAll('#device-table tbody tr[data-device]');
  return (cells.length > 0 || nodes.length > 0) && rows.length > 0;
}"""


def one_page(browser: Any, url: str, token: str, gpus: int) -> dict[str, float]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(url + "/")
    page.fill("#token-input", token)
    t0 = time.perf_counter()
    page.click("#login-form button[type=submit]")
    page.wait_for_function(PAINTED, timeout=120_000)
    first = time.perf_counter() - t0
    height = float(page.evaluate("document.documentElement.scrollHeight"))
    elements = float(page.evaluate("document.getElementsByTagName('*').length"))
    t1 = time.perf_counter()
    page.click("#fabric-full")
    page.wait_for_function(
        f"() => document.querySelectorAll('#fabric-map g.device rect[fill]').length >= {gpus}",
        timeout=120_000,
    )
    full = time.perf_counter() - t1
    context.close()
    return {"first_render_s": first, "page_height_px": height, "elements": elements,
            "full_map_s": full}  # fmt: skip


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="accelnet-dash-bench-") as tmp_s:
        tmp = Path(tmp_s)
        tmp.chmod(0o711)
        db = tmp / "state.db"
        token = api_token(db, "ops", "admin")
        fabric = f"fat-tree:hosts={args.gpus // 8},gpus_per_host=8"
        server = ServeProcess(tmp, db, "--fabric", fabric, "--rate", "0")
        try:
            with sync_playwright() as p, Progress(console=console, transient=True) as progress:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                task = progress.add_task("page loads", total=args.repeats)
                runs = []
                for _ in range(args.repeats):
                    runs.append(one_page(browser, server.url, token, args.gpus))
                    progress.advance(task)
                browser.close()
        finally:
            server.stop()
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {
        "schema": "accelnet.bench.dashboard/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/dashboard_bench.py " + shlex.join(sys.argv[1:]),
        "gpus": args.gpus,
        "fabric": fabric,
        "repeats": args.repeats,
        "viewport": "1440x900",
        "source": source_state(),
        "median": med,
        "runs": runs,
    }


def report(result: dict[str, Any], console: Console) -> None:
    m = result["median"]
    t = Table(title=f"dashboard, {result['gpus']:,} GPUs ({result['fabric']}), medians of "
                    f"{result['repeats']} fresh pages")  # fmt: skip
    for col in ("first render (s)", "page height (px)", "DOM elements", "full map (s)"):
        t.add_column(col, justify="right")
    t.add_row(f"{m['first_render_s']:.2f}", f"{m['page_height_px']:.0f}",
              f"{m['elements']:.0f}", f"{m['full_map_s']:.2f}")  # fmt: skip
    console.print(t)
    console.print(f"src {src_label(result['source'])}; viewport {result['viewport']}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
