"""The CLI's renderings, on hand-built answers (no server)."""

from __future__ import annotations

from rich.console import Console

from accelnet.client import DeviceOut, JobOut, PolicyOut, WhoAmI
from accelnet.client.views import (
    TopView,
    devices_table,
    duration,
    job_detail,
    jobs_table,
    top_screen,
)


def text(renderable: object) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def job(i: int, state: str, **kw: object) -> JobOut:
    return JobOut.model_validate({"id": f"j-{i}", "name": "j", "tenant": "t", "state": state,
                                  "submitted_at": 1000.0 + i, **kw})  # fmt: skip


def device(i: int, **kw: object) -> DeviceOut:
    return DeviceOut.model_validate({"id": f"h/gpu{i}", "host": "h", "model": "L4",
                                     "kind": "gpu", "state": "ready", "phase": "healthy",
                                     "health": "pass", **kw})  # fmt: skip


def test_duration() -> None:
    assert [duration(x) for x in (None, 0.4, 59, 61, 3599, 3600 * 5 + 120, 86400 * 2 + 7200)] == [
        "-", "0s", "59s", "1m01s", "59m59s", "5h02m", "2d02h"]  # fmt: skip


def test_readings_columns_only_when_known() -> None:
    bare = text(devices_table([device(0), device(1)]))
    assert "util" not in bare and "power" not in bare and "h/gpu1" in bare
    rich = text(devices_table([device(0, utilization_pct=50.0, power_w=70.2,
                                      memory_used_bytes=2**30, memory_total_bytes=24 * 2**30,
                                      jobs=["a-1"], busy=True, phase="probing")]))  # fmt: skip
    assert "50%" in rich and "70 W" in rich and "1.0/24.0" in rich and "a-1" in rich
    assert "ready (probing)" in rich and "temp" not in rich


def test_jobs_table_and_top_screen() -> None:
    jobs = [job(1, "pending", reason="needs 2 x L4; 1 free"),
            job(2, "running", started_at=1002.0, devices=["h/gpu0"], share=0.5),
            job(3, "failed", started_at=1003.0, finished_at=1010.0, error="exit 3")]  # fmt: skip
    out = text(jobs_table(jobs, now=1100.0))
    assert "needs 2 x L4; 1 free" in out and "exit 3" in out and "h/gpu0 (0.5 each)" in out
    assert "1m38s" in out and "7s" in out  # running for 98 s; the failed one ran 7 s
    view = TopView(url="http://x", now=1100.0,
                   who=WhoAmI(token_id="a", tenant="t", role="viewer", name=""),
                   policy=PolicyOut(policy="fifo", placement="best-fit"),
                   devices=[device(0, busy=True), device(1)], jobs=jobs[:2] * 3,
                   max_rows=4)  # fmt: skip
    screen = text(top_screen(view))
    assert "as t/viewer" in screen and "policy fifo (best-fit)" in screen
    assert "devices 2 (1 busy)  running 3  queued 3" in screen
    assert "queue (first 4; 2 more)" in screen
    assert screen.index("j-2") < screen.index("j-1")  # running first, then the queue
    down = text(top_screen(TopView(url="http://x", now=0.0, error="unreachable (retrying)")))
    assert "unreachable (retrying)" in down and "devices 0" in down


def test_a_failed_attempt_is_red_only_once_the_job_has_failed() -> None:
    """Issue 26 item 5: a job being retried shows its earlier attempt's failure as such (not
    as the job's error); a job that succeeded on a retry shows none."""
    retried = job(1, "running", started_at=1005.0, attempts=2, failures=1, error="exit 3")
    done = job(
        2,
        "succeeded",
        started_at=1005.0,
        finished_at=1009.0,
        attempts=2,
        failures=1,
        error="exit 3",
    )  # an older server kept the first attempt's error
    failed = job(3, "failed", started_at=1003.0, finished_at=1010.0, error="exit 4")
    table = jobs_table([retried, done, failed], now=1100.0)
    cells = {c: table.columns[5]._cells[i] for i, c in enumerate(("retried", "done", "failed"))}
    assert cells["retried"].plain == "retried after failure 1: exit 3"
    assert cells["retried"].style == "yellow"
    assert cells["done"].plain == ""
    assert cells["failed"].plain == "exit 4" and cells["failed"].style == "red"
    assert "exit 3" not in text(job_detail(done, [], now=1100.0))
    detail = text(job_detail(retried, [], now=1100.0))
    assert "last failure" in detail and "exit 3" in detail
