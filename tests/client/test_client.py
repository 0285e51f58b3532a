"""``accelnet.Client`` against a real server process: every method, as each role."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

import accelnet
from accelnet.client import ApiError, Client, JobOut
from accelnet.client.models import UNRESOLVABLE
from accelnet.sched import JobSpec
from accelnet.sched.reasons import OutcomeCode, WaitCode
from accelnet.specio import SpecError
from tests.client.conftest import Server, create_token


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def until(api: Client, job: JobOut, states: set[str], timeout: float = 20.0) -> JobOut:
    end = time.monotonic() + timeout
    while (out := api.job(job)).state not in states:
        assert time.monotonic() < end, f"{job.id} still {out.state}"
        time.sleep(0.05)
    return out


def test_lazy_export_and_service_calls(server: Server) -> None:
    assert accelnet.Client is Client
    with server.client("alice") as api:
        assert api.health().status == "ok"
        me = api.whoami()
        assert (me.tenant, me.role, me.name) == ("vision", "user", "alice")
        assert repr(api) == f"Client({server.url!r})" and server.tokens["alice"] not in repr(api)


def test_submit_wait_logs_events(server: Server) -> None:
    with server.client("alice") as api:
        name = unique("hello")
        job = api.submit({"name": name, "run": "for i in 1 2 3; do echo line $i; done; echo e >&2"})
        assert isinstance(job, JobOut) and job.name == name and job.tenant == "vision"
        done = api.wait(job, timeout=30)
        assert done.state == "succeeded" and done.finished and done.devices
        assert api.logs(job) == "line 1\nline 2\nline 3\n"
        assert api.logs(job.id, stream="err") == "e\n"
        chunk = api.read_log(job, offset=7)
        assert (chunk.text, chunk.offset, chunk.next_offset, chunk.attempt) == (
            "line 2\nline 3\n", 7, 21, 1)  # fmt: skip
        kinds = [e.kind for e in api.events(job).events]
        assert kinds[0] == "job:pending" and kinds[-1] == "job:succeeded"
        assert api.job(job.id) == done


def test_logs_follow_yields_text_as_it_comes(server: Server) -> None:
    with server.client("alice") as api:
        job = api.submit({"name": unique("follow"),
                          "run": "for i in 1 2 3 4; do echo tick $i; sleep 0.2; done"})  # fmt: skip
        with api.logs(job, follow=True) as stream:
            text = "".join(stream)
        assert text == "".join(f"tick {i}\n" for i in range(1, 5))
        assert api.job(job).state == "succeeded"  # the stream ends once the job has finished


def test_submit_specs_files_and_lists(server: Server, tmp_path: Path) -> None:
    with server.client("alice") as api:
        spec = api.submit(JobSpec(name=unique("spec"), run="true"))
        assert spec.tenant == "vision"  # an unset tenant stays the token's
        first, second = unique("split"), unique("total")
        path = tmp_path / "dag.yaml"
        path.write_text(f"jobs:\n  - name: {second}\n    inputs: {{parts: {first}}}\n"
                        f"    run: ls \"$ACCELNET_INPUT_PARTS\"\n"
                        f"  - name: {first}\n    run: mkdir -p \"$ACCELNET_OUTPUT\" && "
                        f"touch \"$ACCELNET_OUTPUT/p\"\n")  # fmt: skip
        jobs = api.submit(path)
        assert [j.name for j in jobs] == [first, second]  # each after the job it consumes
        assert jobs[1].inputs == {"parts": jobs[0].id}
        assert api.wait(jobs[1], timeout=30).state == "succeeded"
        assert api.logs(jobs[1]) == "p\n"
        (tmp_path / "one.json").write_text(json.dumps({"name": unique("json"), "run": "true"}))
        mixed = api.submit([{"name": unique("dict"), "run": "true"}, str(tmp_path / "one.json")])
        assert len(mixed) == 2 and all(isinstance(j, JobOut) for j in mixed)
        assert api.submit([]) == []
        (tmp_path / "bad.yaml").write_text("name: x\nrn: true\n")
        with pytest.raises(SpecError, match=r"bad.yaml.*rn"):
            api.submit(tmp_path / "bad.yaml")
        with pytest.raises(ValueError, match="pass the list"):
            api.submit({"jobs": [{"name": "x", "run": "true"}]})


def test_jobs_iterates_pages_with_filters(server: Server) -> None:
    with server.client("alice") as api:
        name = unique("page")
        sent = api.submit([{"name": name, "run": "true"} for _ in range(5)])
        got = list(api.jobs(name=name, page_size=2))
        assert [j.id for j in got] == [j.id for j in reversed(sent)]  # newest first, each once
        assert [j.id for j in api.jobs(name=name, limit=3, page_size=2)] == [j.id for j in got[:3]]
        page = api.jobs_page(name=name, limit=2)
        assert len(page.jobs) == 2 and page.next is not None
        rest = api.jobs_page(name=name, limit=10, cursor=page.next)
        assert [j.id for j in page.jobs + rest.jobs] == [j.id for j in got] and rest.next is None
        for j in sent:
            api.wait(j, timeout=30)
        assert len(list(api.jobs("succeeded", name=name))) == 5
        assert list(api.jobs(["failed", "cancelled"], name=name)) == []
        assert all(j.tenant == "vision" for j in api.jobs(limit=50))
    with server.client("bob") as other:
        assert list(other.jobs(name=name)) == []  # another tenant's jobs do not exist for it


def test_cancel_queued_and_running(server: Server) -> None:
    with server.client("admin") as admin, server.client("alice") as api:
        for dev in ("jetson0/gpu0", "jetson1/gpu0"):
            assert admin.drain(dev, reason="test").state in ("draining", "drained")
        try:
            queued = api.submit({"name": unique("queued"), "run": "true",
                                 "resources": {"accelerators": "Jetson-AGX-Orin:1"}})  # fmt: skip
            queued = until(api, queued, {"pending", "admitted"})
            assert queued.queued
            assert api.cancel(queued).state == "cancelled"
        finally:
            for dev in ("jetson0/gpu0", "jetson1/gpu0"):
                admin.undrain(dev)
        running = api.submit({"name": unique("long"), "run": "sleep 30",
                              "resources": {"accelerators": "L4:1"}})  # fmt: skip
        until(api, running, {"running"})
        api.cancel(running.id)
        assert api.wait(running, timeout=20).state == "cancelled"
        with pytest.raises(ApiError) as err:
            api.cancel(running)
        assert (err.value.status, err.value.code) == (409, "conflict")


def test_wait_times_out(server: Server) -> None:
    with server.client("alice") as api:
        job = api.submit({"name": unique("sleepy"), "run": "sleep 30"})
        with pytest.raises(TimeoutError, match=job.id):
            api.wait(job, timeout=0.3)
        api.cancel(job)


def test_cluster_events_page_and_stream(server: Server) -> None:
    with server.client("alice") as api:
        before = api.events(limit=1)
        assert before.events and before.next >= 1
        job = api.submit({"name": unique("evt"), "run": "true"})
        api.wait(job, timeout=30)
        latest = api.events(since=0, limit=5000)
        mine = [e.kind for e in latest.events if e.job == job.id]
        assert mine[0] == "job:pending" and "job:succeeded" in mine
        with api.watch_events(since=latest.events[0].seq) as stream:
            seen = []
            for ev in stream:  # replays what is there, then goes live; stops at our job's end
                seen.append(ev)
                if ev.job == job.id and ev.kind == "job:succeeded":
                    break
        assert [e.seq for e in seen] == sorted({e.seq for e in seen})


def test_devices_and_admin_operations(server: Server) -> None:
    with server.client("val") as viewer, server.client("admin") as admin:
        devices = viewer.devices()
        assert len(devices) == 18 and {d.model for d in devices} >= {"H100-SXM", "L4", "T4"}
        one = viewer.device("t4box/gpu2")
        assert (one.id, one.host, one.model) == ("t4box/gpu2", "t4box", "T4")
        probed = admin.probe("t4box/gpu2")
        assert probed.answer is not None and probed.answer.ok and probed.answer.findings
        drained = admin.drain("t4box/gpu2", reason="maintenance")
        assert drained.state in ("draining", "drained")
        assert admin.undrain("t4box/gpu2").answer is not None
        assert admin.reset("t4box/gpu2").id == "t4box/gpu2"
        with pytest.raises(ApiError) as err:
            viewer.drain("t4box/gpu2")
        assert (err.value.status, err.value.code) == (403, "forbidden")
        with pytest.raises(ApiError) as err:
            viewer.device("nohost/gpu9")
        assert (err.value.status, err.value.code) == (404, "not_found")
        with pytest.raises(ValueError, match="valid: drain"):
            admin.device_op("t4box/gpu2", "explode")


def test_fabric_tenants_policy_audit(server: Server) -> None:
    with server.client("alice") as api, server.client("admin") as admin:
        fabric = api.fabric()
        assert fabric["name"] == "mixed-lab" and len(fabric["hosts"]) >= 4
        assert [t.name for t in api.tenants()] == ["vision"]  # a non-admin: its own
        tenant = admin.set_tenant("vision", weight=2.0, quota={"L4": 4})
        assert (tenant.weight, tenant.quota) == (2.0, {"L4": 4.0})
        assert admin.set_tenant("vision", weight=1.0).quota == {"L4": 4.0}  # the rest stays
        assert {t.name for t in admin.tenants()} >= {"ops", "vision", "speech"}
        policy = api.policy()
        assert policy.policy == "fifo" and "priority" in policy.policies
        assert admin.set_policy("priority", placement="first-fit").policy == "priority"
        las = admin.set_policy("las", round_s=60, min_reallocation_s=1920)
        assert (las.policy, las.round_s, las.min_reallocation_s) == ("las", 60.0, 1920.0)
        assert admin.set_policy("fifo").placement in policy.placements
        assert api.policy().min_reallocation_s is None
        entries = admin.audit(limit=5000).entries
        assert any(e.path == "/api/v1/policy" and e.method == "PUT" for e in entries)
        with pytest.raises(ApiError) as err:
            api.audit()
        assert err.value.status == 403


def test_over_quota_names_tenant_and_field(server: Server) -> None:
    with server.client("admin") as admin:
        admin.set_tenant("tiny", quota={"*": 0})
    tiny = Client(server.url, create_token(server.db, "tiny", "user"))
    with tiny, pytest.raises(ApiError) as err:
        tiny.submit({"name": "big", "run": "true", "resources": {"accelerators": "L4:1"}})
    assert (err.value.status, err.value.code) == (422, "over_quota")
    assert err.value.field == "resources.accelerators" and "tiny" in err.value.message


def next_step(job: JobOut) -> str:
    """What a user's tooling does with a job, branching on the codes (never on the text)."""
    if job.finished:
        steps = {"succeeded": "collect", "timed_out": "resubmit with a longer timeout_s",
                 "task_failed": "read stderr"}  # fmt: skip
        return steps.get(job.outcome_code or "", "page someone")
    if job.unresolvable:
        return "change or cancel"
    return "wait" if job.reason_code else "watch"


def test_a_client_branches_on_reason_and_outcome_codes(server: Server) -> None:
    with server.client("alice") as api:
        late = api.submit({"name": unique("late"), "run": "sleep 30", "timeout_s": 0.5,
                           "max_retries": 0})  # fmt: skip
        up = api.submit({"name": unique("up"), "run": "sleep 30"})
        down = api.submit({"name": unique("down"), "run": "true", "inputs": {"x": up.name}})
        done = api.wait(late, timeout=60)
        assert (done.state, done.outcome_code) == ("failed", "timed_out")
        assert next_step(done) == "resubmit with a longer timeout_s"
        held = api.job(down)
        assert (held.reason_code, held.outcome_code) == ("awaiting_inputs", None)
        assert held.reason and next_step(held) == "wait"
        api.cancel(up)
        gone = api.wait(down, timeout=60)  # its input was cancelled: it cannot run
        assert (gone.state, gone.outcome_code) == ("failed", "input_failed")
        assert api.wait(up, timeout=60).outcome_code == "cancelled"
        schema = api._http.get("/openapi.json").json()["components"]["schemas"]
        codes = {c.value for c in WaitCode}
        assert set(schema["WaitCode"]["enum"]) == codes
        assert set(schema["OutcomeCode"]["enum"]) == {c.value for c in OutcomeCode}
        assert {c for c in codes if WaitCode(c).unresolvable} == UNRESOLVABLE
