"""Commands that talk to a running server (``accelnet serve``) through :class:`accelnet.Client`:
``submit``, ``status``, ``logs``, ``cancel``, ``devices``, ``top`` (docs/client.md).

The server and token come from ``--url``/``--token``, then ``ACCELNET_URL`` and
``ACCELNET_TOKEN``, then ``~/.config/accelnet/client.toml`` (:mod:`accelnet.client.config`).
Exit codes: 0 done; 1 the server refused (its code, message and field are printed) or a
job did not succeed (``submit --wait``); 2 no URL or token, a bad config file, or a server
that cannot be reached (the URL and where it came from are named).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.live import Live

from accelnet.cli.output import fail, note, out_console
from accelnet.client import ApiError, Client, ConfigError, JobOut, resolve
from accelnet.client.models import LIVE_STATES
from accelnet.client.views import (
    TopView,
    devices_table,
    job_detail,
    jobs_table,
    services_table,
    top_screen,
)
from accelnet.specio import SpecError

UrlOpt = Annotated[
    str | None,
    typer.Option("--url", help="the server [default: $ACCELNET_URL, then the config file]"),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", help="bearer token [default: $ACCELNET_TOKEN, then the config file]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON for scripts (the API's bodies)")]


@contextlib.contextmanager
def session(url: str | None, token: str | None) -> Iterator[Client]:
    """A client for the resolved URL and token; every error ends the command with a
    message that names what to fix (see the module docstring for exit codes)."""
    try:
        config = resolve(url, token)
        found_url, found_token = config.require()
    except ConfigError as exc:
        fail(exc, 2)
    client = Client(found_url, found_token)
    try:
        yield client
    except ApiError as exc:
        if exc.status == 0:
            fail(f"{exc.message} (URL from {config.url_source}); is `accelnet serve` running "
                 "there? Set another with --url or ACCELNET_URL", 2)  # fmt: skip
        hint = ""
        if exc.status == 401:
            hint = f" (token from {config.token_source}; create one with accelnet token create)"
        elif exc.code == "bad_response":
            hint = f" (URL from {config.url_source})"
        fail(f"error: {exc}{hint}", 1)
    except SpecError as exc:
        fail(exc, 1)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        client.close()


def dump(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _jobs_json(jobs: list[JobOut]) -> dict[str, Any]:
    return {"jobs": [j.model_dump(mode="json") for j in jobs]}


def submit(
    files: Annotated[list[str], typer.Argument(help="job files (YAML or JSON; docs/job-spec.md)")],
    wait: Annotated[bool, typer.Option("--wait", help="wait until every job has finished")] = False,
    timeout: Annotated[
        float | None, typer.Option(help="with --wait: give up after this many seconds")
    ] = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit the jobs of job files, all or none (checked here first, then by the
    server). With --wait, exit 1 unless every job succeeded."""
    with session(url, token) as api:
        jobs = api.submit(files)
        if not as_json:
            for j in jobs:
                why = f": {j.reason}" if j.reason else ""
                out_console().print(f"submitted [bold]{j.id}[/] (tenant {j.tenant}) {j.state}{why}",
                                highlight=False)  # fmt: skip
        if not wait:
            if as_json:
                dump(_jobs_json(jobs))
            return
        end = None if timeout is None else time.monotonic() + timeout
        done: list[JobOut] = []
        for j in jobs:
            left = None if end is None else max(0.0, end - time.monotonic())
            try:
                done.append(api.wait(j, timeout=left))
            except TimeoutError:
                waiting = ", ".join(x.id for x in jobs[len(done) :])
                fail(f"gave up after {timeout:g} s; not finished: {waiting}", 1)
            if not as_json:
                last = done[-1]
                extra = f": {last.error}" if last.error else ""
                out_console().print(f"{last.id} {last.state}{extra}", highlight=False)
        if as_json:
            dump(_jobs_json(done))
        if any(j.state != "succeeded" for j in done):
            raise typer.Exit(1)


def status(
    job: Annotated[str | None, typer.Argument(help="a job id (none: the latest jobs)")] = None,
    state: Annotated[
        str | None, typer.Option(help="only jobs in these states (comma-separated)")
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's jobs (admin)")] = None,
    limit: Annotated[int, typer.Option(min=1, help="how many jobs, newest first")] = 20,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """One job (its fields and event log), or the running services and the latest jobs."""
    with session(url, token) as api:
        now = time.time()
        if job is not None:
            out = api.job(job)
            if as_json:
                dump(out.model_dump(mode="json"))
                return
            out_console().print(job_detail(out, api.events(out).events, now))
            return
        jobs = list(api.jobs(state, tenant=tenant, limit=limit))
        services = [s for s in api.services() if tenant is None or s.tenant == tenant]
        if as_json:
            dump(_jobs_json(jobs) | {"services": [s.model_dump(mode="json") for s in services]})
            return
        if services:
            out_console().print(services_table(services, title="services"))
        if not jobs:
            note("no jobs" + (f" in state {state}" if state else ""))
            return
        out_console().print(jobs_table(jobs, now, title="jobs" if services else None))


def logs(
    job: Annotated[str, typer.Argument(help="the job's id")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="go on printing until the job has finished")
    ] = False,
    rank: Annotated[int, typer.Option(min=0, help="which task of a gang")] = 0,
    err: Annotated[bool, typer.Option("--err", help="stderr instead of stdout")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A job's output (stdout of rank 0 of its latest attempt, unless told otherwise)."""
    stream: Literal["out", "err"] = "err" if err else "out"
    with session(url, token) as api:
        if not follow:
            sys.stdout.write(api.logs(job, rank=rank, stream=stream))
            sys.stdout.flush()
            return
        with api.logs(job, follow=True, rank=rank, stream=stream) as text:
            for chunk in text:
                sys.stdout.write(chunk)
                sys.stdout.flush()


def cancel(
    jobs: Annotated[list[str], typer.Argument(help="job ids")],
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel jobs: queued ones at once, running ones once their tasks stop. Exit 1 if
    any could not be cancelled (unknown, or finished already)."""
    failed = False
    with session(url, token) as api:
        for job in jobs:
            try:
                out = api.cancel(job)
            except ApiError as exc:
                if exc.status == 0:
                    raise
                Console(stderr=True).print(f"{job}: {exc}", style="red", highlight=False)
                failed = True
                continue
            word = "cancelled" if out.finished else f"cancelling ({out.state}; stops soon)"
            out_console().print(f"{out.id} {word}", highlight=False)
    if failed:
        raise typer.Exit(1)


def devices(as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """The server's devices, over its API: state, health, readings, jobs. This machine's
    devices read here (no server): accelnet device list."""
    with session(url, token) as api:
        found = api.devices()
        if as_json:
            dump({"devices": [d.model_dump(mode="json") for d in found]})
            return
        out_console().print(devices_table(found))


def _frame(api: Client, who: Any, rows: int) -> TopView:
    now = time.time()
    try:
        return TopView(
            url=api.url, now=now, who=who, policy=api.policy(), devices=api.devices(),
            jobs=list(api.jobs(LIVE_STATES, limit=500, page_size=500)), max_rows=rows,
        )  # fmt: skip
    except ApiError as exc:
        if exc.status not in (0, 429, 500, 503):
            raise
        return TopView(url=api.url, now=now, who=who, error=f"{exc} (retrying)", max_rows=rows)


def top(
    interval: Annotated[float, typer.Option(min=0.2, help="seconds between refreshes")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="print one frame and exit")] = False,
    rows: Annotated[int, typer.Option(min=1, help="most devices and jobs shown")] = 30,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A live view of the devices and the queue (why each job waits); Ctrl-C ends it."""
    with session(url, token) as api:
        who = api.whoami()  # a bad token or URL fails here, before the screen opens
        if once:
            frame = _frame(api, who, rows)
            if frame.error:
                fail(frame.error.removesuffix(" (retrying)"), 1)
            out_console().print(top_screen(frame))
            return
        with (
            contextlib.suppress(KeyboardInterrupt),
            Live(top_screen(_frame(api, who, rows)), auto_refresh=False, screen=True) as live,
        ):
            while True:
                time.sleep(interval)
                live.update(top_screen(_frame(api, who, rows)), refresh=True)
