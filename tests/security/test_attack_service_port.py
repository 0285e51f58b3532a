"""An attack on a service: another user's process binds the port a replica was given before
the replica does, and answers its readiness check. The router must send it nothing: the
service checks that the listener on a replica's port runs as the replica's tenant."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from accelnet.runtime.local.worker import free_port
from accelnet.runtime.sdk import LocalCluster
from accelnet.serve.ownership import listener_uid

NOBODY = 65534
SQUATTER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print(self.path, flush=True)
        self.send_response(200); self.send_header("content-length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the squatter as another user (needs root)")
def test_a_process_of_another_user_on_a_replicas_port_gets_no_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    assert port is not None
    squatter = subprocess.Popen(["/usr/bin/python3", "-c", SQUATTER, str(port)],
                                stdout=subprocess.PIPE, text=True, user=NOBODY, group=NOBODY,
                                extra_groups=[], cwd="/")  # fmt: skip
    seen: list[str] = []
    threading.Thread(target=lambda: seen.extend(squatter.stdout or []), daemon=True).start()
    try:
        end = time.monotonic() + 30
        while listener_uid(port) != NOBODY:
            assert squatter.poll() is None and time.monotonic() < end, "no squatter"
            time.sleep(0.05)
        # the service hands its replica exactly the port the squatter holds
        monkeypatch.setattr("accelnet.serve.service.free_port", lambda: port)
        run = f"{sys.executable} -m accelnet.workloads.digits_service"
        spec = {"name": "digits", "run": run, "resources": {"accelerators": "any:1"},
                "replicas": {"min": 1, "max": 1}}  # fmt: skip
        with LocalCluster("pcie-4xL4", workdir=tmp_path / "work") as cluster, \
                cluster.serve(spec, tick_s=0.05) as svc:  # fmt: skip
            end = time.monotonic() + 60
            while not any(w == "error" and f"uid {NOBODY}" in d for _, w, d in svc.events):
                assert time.monotonic() < end, svc.events
                time.sleep(0.05)
            with pytest.raises(httpx.TimeoutException):  # no ready replica: it waits
                httpx.get(f"{svc.url}/predict", params={"index": 1}, timeout=2)
            assert svc.ready_count() == 0
        assert not [p for p in seen if p.startswith("/predict")], seen
        assert any(p.startswith("/healthz") for p in seen)  # it did answer the check
    finally:
        squatter.kill()
        squatter.wait()
