"""``accelnet serve`` as a process: rate limits answered with 429, a clean stop on SIGTERM
(workers gone, open streams ended), binding refused where it would be unsafe."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.api.conftest import spawn, wait_state

V1 = "/api/v1"
MAIN = [sys.executable, "-c", "from accelnet.cli.main import main; main()", "serve"]


def test_rate_limit_then_clean_shutdown(tmp_path: Path) -> None:
    srv = spawn(tmp_path, "--fabric", "pcie-4xL4", "--rate", "1", "--burst", "3")
    try:
        with srv.client("alice") as alice, srv.client("bob") as bob, srv.client("val") as val:
            codes = [alice.get(f"{V1}/whoami").status_code for _ in range(4)]
            assert codes[:3] == [200, 200, 200] and codes[3] == 429
            r = alice.get(f"{V1}/whoami")
            assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["code"] == "rate_limited"
            assert bob.get(f"{V1}/whoami").status_code == 200  # per token
            jid = bob.post(f"{V1}/jobs", json={"name": "long", "run": "sleep 60"}).json()
            wait_state(bob, jid["jobs"][0]["id"], {"running"})
            workers = [p for p in psutil.Process(srv.proc.pid).children(recursive=True)]
            assert workers
            with val.stream("GET", f"{V1}/events", headers={"Accept": "text/event-stream"}) as r:
                assert next(r.iter_lines()) == "retry: 2000"
                start = time.monotonic()
                assert srv.stop(timeout=20) == 0  # with a stream open and a job running
                assert time.monotonic() - start < 15
        gone = psutil.wait_procs(workers, timeout=60)[1]
        assert not gone, f"workers left: {gone}"
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
    assert "Traceback" not in srv.output()


def test_unsafe_binds_are_refused(tmp_path: Path) -> None:
    r = subprocess.run(
        [*MAIN, "--host", "0.0.0.0", "--port", "0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "without TLS" in r.stderr and "--insecure-bind" in r.stderr
    r = subprocess.run(
        [*MAIN, "--tls-cert", str(tmp_path / "c.pem"), "--port", "0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--tls-key" in r.stderr
