"""The API's pure parts: quota ledger, rate limiter, tokens, tenants, error paths, options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accelnet.api.db import ApiDb
from accelnet.api.errors import field_path
from accelnet.api.limits import RateLimiter, retry_after
from accelnet.api.quota import Charge, QuotaLedger
from accelnet.api.server import ServeError, ServeOptions, check, is_loopback, serve
from accelnet.api.streams import sse_message
from accelnet.api.tenants import TenantRecord, Tenants
from accelnet.api.tokens import Role, Tokens, hash_secret, parse_token
from accelnet.runtime.clock import ManualClock


def test_a_queued_job_counts_against_every_model_it_may_run_on() -> None:
    ledger = QuotaLedger()
    ledger.charge("a", Charge("t", 2, ("L4", "T4")))
    assert ledger.use("t") == {"*": 2, "L4": 2, "T4": 2}
    quota = {"L4": 3, "T4": 2}
    assert ledger.check("t", quota, 1, ["L4", "T4"]) is None  # L4 has room
    over = ledger.check("t", quota, 2, ["L4", "T4"])
    assert over is not None and over.message() == (
        "tenant t is over its quota: L4 quota 3 devices, 2 in use or queued; T4 quota 2 "
        "devices, 2 in use or queued; this job needs 2 more"
    )
    ledger.place("a", "L4")  # it runs on L4: T4 is free again
    assert ledger.use("t") == {"*": 2, "L4": 2}
    assert ledger.check("t", quota, 2, ["T4"]) is None
    ledger.unplace("a")
    assert ledger.use("t")["T4"] == 2
    ledger.release("a")
    assert ledger.use("t") == {} and "a" not in ledger


def test_quota_for_all_models_and_within_one_request() -> None:
    ledger = QuotaLedger()
    ledger.charge("a", Charge("t", 0.5, ("T4",), placed="T4"))
    ledger.charge("b", Charge("other", 8, ("H100-SXM",)))
    assert ledger.check("t", {}, 100, ["T4"]) is None  # no quota: anything goes
    pending = [Charge("t", 1, ("L4",))]
    over = ledger.check("t", {"*": 2}, 1, ["H100-SXM"], pending)
    assert over is not None and "all models quota 2 devices, 1.5 in use or queued" in (
        over.message()
    )
    assert ledger.check("t", {"H100": 1}, 1, ["H100-SXM"]) is None  # alias -> catalog name
    assert ledger.check("t", {"H100": 1}, 2, ["H100-SXM"]) is not None
    assert ledger.tenants() == {"t", "other"}


def test_token_bucket_on_a_manual_clock() -> None:
    clock = ManualClock(100.0)
    limiter = RateLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)  # one more in half a second
    assert limiter.take("b") == 0.0  # per key
    clock.advance(0.5)
    assert limiter.take("a") == 0.0
    clock.advance(100)
    assert [limiter.take("a") for _ in range(4)][-1] > 0  # refills up to the burst only
    assert RateLimiter(0, 0, clock).take("x") == 0.0  # rate 0: no limit
    assert (retry_after(0.01), retry_after(1.0), retry_after(1.2)) == ("1", "1", "2")


def test_tokens_are_stored_hashed_and_revocable(tmp_path: Path) -> None:
    db = ApiDb(tmp_path / "t.db")
    tokens = Tokens(db)
    info, token = tokens.create("vision", Role.USER, "ci", 1.0)
    token_id, secret = parse_token(token) or ("", "")
    assert token_id == info.id and len(secret) == 64 and token.startswith("acn_")
    rows = db.query("SELECT * FROM api_tokens")
    assert secret not in repr(rows) and hash_secret(secret) in repr(rows)
    who = tokens.authenticate(token)
    assert who is not None and (who.tenant, who.role, who.name) == ("vision", Role.USER, "ci")
    assert tokens.authenticate(token[:-1] + ("0" if token[-1] != "0" else "1")) is None
    assert tokens.authenticate("acn_nonsense") is None and parse_token("Bearer x") is None
    assert tokens.revoke(info.id, 2.0) and not tokens.revoke(info.id, 3.0)
    assert tokens.authenticate(token) is None
    assert [t.active for t in tokens.list()] == [False]
    with pytest.raises(ValueError, match="tenant"):
        tokens.create("no spaces", Role.USER, "", 1.0)
    assert Role.ADMIN.allows(Role.USER) and not Role.VIEWER.allows(Role.USER)
    db.close()


def test_tenants_table(tmp_path: Path) -> None:
    db = ApiDb(tmp_path / "t.db")
    tenants = Tenants(db)
    assert tenants.ensure("a", 1.0).plain
    tenants.put(TenantRecord("b", 2.0, {"L4": 1}), 1.0)
    other = Tenants(ApiDb(tmp_path / "t.db"))  # another process's view
    assert set(other.all()) == {"a", "b"} and other.all()["b"].quota == {"L4": 1}
    assert not other.all()["b"].plain and other.all()["b"].tenant().weight == 2.0
    tenants.ensure("c", 2.0)
    assert other.get("c") is not None  # an unknown name reads the table again
    with pytest.raises(ValueError, match="weight"):
        tenants.put(TenantRecord("d", 0.0), 1.0)


def test_error_paths_and_sse_format() -> None:
    assert field_path(("body", "jobs", 0, "resources", "accelerators")) == (
        "jobs[0].resources.accelerators"
    )
    assert field_path(("query", "limit")) == "limit" and field_path(("body",)) == ""
    assert sse_message(7, {"kind": "job:running"}) == 'id: 7\ndata: {"kind":"job:running"}\n\n'


def test_serve_options_that_cannot_work() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    check(ServeOptions())
    check(ServeOptions(host="0.0.0.0", insecure_bind=True))
    for bad, message in (
        (ServeOptions(host="10.0.0.1"), "without TLS"),
        (ServeOptions(backend="spark"), "not available"),
        (ServeOptions(tls_cert=Path("c.pem")), "both"),
        (ServeOptions(port=70000), "--port"),
        (ServeOptions(burst=0), "--burst"),
    ):
        with pytest.raises(ServeError, match=message):
            check(bad)


def test_serve_refuses_a_reservation_for_a_round_policy() -> None:
    with pytest.raises(ValueError, match="queue policies"):
        serve(ServeOptions(policy="hetero-fair", reserve_after_s=60.0))


def test_serve_checks_the_reallocation_interval_by_its_flag() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ServeError, match="--min-reallocation-s"):
            check(ServeOptions(policy="las", min_reallocation_s=bad))
    check(ServeOptions(policy="fifo", min_reallocation_s=1920.0))  # kept for round policies


def test_the_request_counter_sees_every_answer_once_even_a_refusal() -> None:
    """Issue 26 item 2: the outermost middleware counts each answer once by route
    template, code and tenant; a 429 answered by an inner limit is counted too."""
    import anyio

    from accelnet.api.request_counts import RequestCountMiddleware, RequestCounts
    from accelnet.api.tokens import Principal, Role

    async def refuse(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 429, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def answer(scope: Any, receive: Any, send: Any) -> None:
        scope["state"]["principal"] = Principal("t1", "vision", Role.USER)
        scope["route"] = type("R", (), {"path": "/api/v1/jobs/{job_id}"})()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    counts = RequestCounts()

    async def call(app: Any, path: str) -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: Any) -> None:
            pass

        scope = {"type": "http", "method": "GET", "path": path, "headers": []}
        await RequestCountMiddleware(app, counts)(scope, receive, send)

    anyio.run(call, refuse, "/api/v1/jobs")
    anyio.run(call, answer, "/api/v1/jobs/abc")
    anyio.run(call, answer, "/api/v1/jobs/def")
    assert counts.snapshot() == {
        ("GET", "unmatched", "429", ""): 1,
        ("GET", "/api/v1/jobs/{job_id}", "200", "vision"): 2,
    }


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("rank 0 failed: boom (log: /srv/w/logs/train-1a2b.2.0.err)",
         "rank 0 failed: boom (log: attempt 2, rank 0, stderr)"),
        ("setup on n1 failed: 3 (log: /srv/w/logs/train-1a2b.1.setup-1.err)",
         "setup on n1 failed: 3 (log: attempt 1, setup on node 1, stderr)"),
        ("rank 3 lost: x (log: /srv/(odd) dir/logs/a.b.c.7.3.out)",
         "rank 3 lost: x (log: attempt 7, rank 3, stdout)"),
        ("requeued (retry 1 of 2, in 2 s): rank 0 failed: e (log: /w/logs/j.1.0.err); more",
         "requeued (retry 1 of 2, in 2 s): rank 0 failed: e (log: attempt 1, rank 0, stderr); "
         "more"),
        ("x = outputs of up-1 at /srv/w/outputs/up-1 (by reference); "
         "y = outputs of up-2 at /srv/w/outputs/up-2 (by reference)",
         "x = outputs of up-1 (by reference); y = outputs of up-2 (by reference)"),
        ("nothing to hide", "nothing to hide"),
    ],
)  # fmt: skip
def test_public_text_shows_no_server_path(text: str, shown: str) -> None:
    from accelnet.api.redact import public_text

    assert public_text(text) == shown
    assert "/srv" not in (public_text(text) or "") and "/w/" not in (public_text(text) or "")
