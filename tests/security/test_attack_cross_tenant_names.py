"""Names, ids and priorities do not cross tenants, against a real ``accelnet serve`` in its
default configuration (no ``--run-as``; its default rate limits): tenant vision's
high-priority job preempts tenant speech's job, and nothing speech can read names
vision's job, its name or its priority (its job, its events, the event list and stream,
its logs, every other GET the server publishes, /metrics, the dashboard); vision's waiting
reason does not name speech's job. ``inputs`` names resolve only among the submitting
tenant's own jobs, and another tenant's job, by name or id, is answered exactly as one that
does not exist (issue 21, items 5 and 8)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, spawn, wait_state

V1 = "/api/v1"
HIGH_NAME = "ahigh7q"  # vision's preempting job
HIGH_PRIORITY = 737
LOW_NAME = "bstubborn"  # speech's preempted job (ignores SIGTERM: stopped after the grace)
PRIORITY = re.compile(rf"(?<![\w.]){HIGH_PRIORITY}(?![\w.])")
WAIT_S = 60.0


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = spawn(tmp_path_factory.mktemp("names"), "--fabric", "pcie-4xL4")
    yield s
    s.stop()


def _submit(c: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    for _ in range(100):  # the default rate limit may answer 429: wait as it says
        r = c.post(f"{V1}/jobs", json=body)
        if r.status_code != 429:
            return r
        time.sleep(min(2.0, float(r.headers.get("retry-after", "1"))))
    raise AssertionError(f"still rate limited: {r.text}")


def _get(c: httpx.Client, path: str, **kw: Any) -> httpx.Response:
    for _ in range(100):
        r = c.get(path, **kw)
        if r.status_code != 429:
            return r
        time.sleep(min(2.0, float(r.headers.get("retry-after", "1"))))
    raise AssertionError(f"still rate limited: {path}")


class Watcher:
    """Reads vision's queued jobs (their waiting reasons) over and over until stopped."""

    def __init__(self, c: httpx.Client) -> None:
        self.c = c
        self.seen: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                r = self.c.get(f"{V1}/jobs", params={"state": "pending,admitted"})
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                self.seen.extend(str(j.get("reason")) for j in r.json()["jobs"])
            self.stop.wait(0.025 if r.status_code == 200 else 0.5)  # under the rate limit

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def _stream_until(c: httpx.Client, last: int) -> str:
    """The SSE event stream from the start, until the event numbered ``last``."""
    out: list[str] = []
    end = time.monotonic() + WAIT_S
    with c.stream("GET", f"{V1}/events", headers={"Accept": "text/event-stream"}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            out.append(line)
            if line.startswith("id: ") and int(line[4:]) >= last:
                break
            assert time.monotonic() < end, f"the stream never reached event {last}"
    return "\n".join(out)


def _gets(spec: dict[str, Any]) -> list[str]:
    return [p for p, item in spec["paths"].items() if "get" in item]


def test_a_preemption_tells_neither_tenant_about_the_other(srv: Server) -> None:
    with (
        srv.client("admin") as admin,
        srv.client("alice") as alice,  # tenant vision
        srv.client("bob") as bob,  # tenant speech
        srv.client("val") as val,  # a viewer of vision
    ):
        r = admin.put(f"{V1}/policy", json={"policy": "priority-preempt"})
        assert r.status_code == 200, r.text
        low = _submit(bob, {"name": LOW_NAME, "run": "trap '' TERM; sleep 600",
                            "resources": {"accelerators": "L4:4"}})  # fmt: skip
        assert low.status_code == 201, low.text
        low_id = str(low.json()["jobs"][0]["id"])
        wait_state(bob, low_id, {"running"}, timeout=WAIT_S)
        with Watcher(val) as watcher:
            high = _submit(alice, {"name": HIGH_NAME, "run": "sleep 600", "priority": HIGH_PRIORITY,
                                   "resources": {"accelerators": "L4:2"}})  # fmt: skip
            assert high.status_code == 201, high.text
            high_id = str(high.json()["jobs"][0]["id"])
            wait_state(alice, high_id, {"running"}, timeout=WAIT_S)
        wait_state(bob, low_id, {"admitted"}, timeout=WAIT_S)  # requeued, waiting

        # speech was told it was preempted, and by nobody it may know
        events = _get(bob, f"{V1}/jobs/{low_id}/events").json()["events"]
        preempted = [e["detail"] for e in events if e["kind"] == "job:preempting"]
        assert preempted == ["preempted for a higher-priority job of another tenant"], events

        # everything speech can read
        texts: dict[str, str] = {}
        spec = _get(bob, "/openapi.json").json()
        device = _get(alice, f"{V1}/jobs/{high_id}").json()["devices"][0]
        values = {"job_id": low_id, "device_id": device, "name": "speech"}
        for path in _gets(spec):
            filled = re.sub(r"\{([^}:]+)(:[^}]*)?\}", lambda m: values[m.group(1)], path)
            r = _get(bob, filled, headers={"Accept": "application/json"})
            texts[filled] = r.text
        for stream in ("out", "err"):
            path = f"{V1}/jobs/{low_id}/logs"
            texts[f"{path}?stream={stream}"] = _get(bob, path, params={"stream": stream}).text
        listed = _get(bob, f"{V1}/events", params={"since": 0, "limit": 5000}).json()
        assert listed["events"], listed
        texts["events (list)"] = json.dumps(listed)
        texts["events (stream)"] = _stream_until(bob, listed["events"][-1]["seq"])
        texts["/metrics"] = _get(bob, "/metrics").text
        texts["/"] = _get(bob, "/").text
        assert low_id in texts[f"{V1}/jobs/{low_id}/events"]  # the reads did reach speech's job
        for where, text in texts.items():
            assert high_id not in text, (where, text[-2000:])
            assert HIGH_NAME not in text, (where, text[-2000:])
            assert not PRIORITY.search(text), (where, text[-2000:])

        # vision's job: neither its reasons nor its events name speech's job
        reasons = [*watcher.seen, str(high.json()["jobs"][0]["reason"])]
        mine = json.dumps(_get(alice, f"{V1}/jobs/{high_id}/events").json())
        mine += json.dumps(_get(alice, f"{V1}/events", params={"since": 0}).json())
        for text in (*reasons, mine):
            assert low_id not in text and LOW_NAME not in text, text
        for reason in reasons:
            if "preempting" in reason:
                assert reason.endswith("preempting 1 job of another tenant"), reason

        for c, jid in ((alice, high_id), (bob, low_id)):
            assert c.post(f"{V1}/jobs/{jid}/cancel").status_code == 202
        admin.put(f"{V1}/policy", json={"policy": "fifo"})


def _error(r: httpx.Response) -> tuple[int, str, str]:
    err = r.json()["error"]
    return r.status_code, err["field"], err["message"]


@pytest.mark.parametrize(("me", "other"), [("alice", "bob"), ("bob", "alice")])
def test_inputs_resolve_among_the_tenants_own_jobs(srv: Server, me: str, other: str) -> None:
    with srv.client(me) as mine, srv.client(other) as theirs:
        name = f"common-{me}"
        own = _submit(mine, {"name": name, "run": "true"})
        assert own.status_code == 201, own.text
        own_id = own.json()["jobs"][0]["id"]
        later = _submit(theirs, {"name": name, "run": "true"})  # the other tenant, after
        assert later.status_code == 201, later.text
        their_id = later.json()["jobs"][0]["id"]
        only = _submit(theirs, {"name": f"only-{other}", "run": "true"})
        assert only.status_code == 201, only.text

        # the name is mine: my job of that name, not the other tenant's later one
        r = _submit(mine, {"name": "use", "run": "true", "inputs": {"d": name}})
        assert r.status_code == 201, r.text
        assert r.json()["jobs"][0]["inputs"] == {"d": own_id}

        # the other tenant's job, by name or id, is answered as no job at all
        for ref, nothing in ((f"only-{other}", "no-such-name"), (their_id, "nosuch-0123abcd")):
            r = _submit(mine, {"name": "use", "run": "true", "inputs": {"d": ref}})
            absent = _submit(mine, {"name": "use", "run": "true", "inputs": {"d": nothing}})
            code, field, message = _error(r)
            assert (code, field) == (422, "inputs.d"), r.text
            assert (code, field, message.replace(ref, nothing)) == _error(absent)
