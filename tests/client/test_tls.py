"""A server with TLS of its own (``--tls-cert``/``--tls-key``): the client verifies it
with the certificate as CA bundle, and refuses it without."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from accelnet.client import ApiError, Client
from tests.client.conftest import spawn, stop


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_with_a_ca_bundle(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    srv = spawn(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert srv.url.startswith("https://127.0.0.1:")
        with Client(srv.url, srv.tokens["alice"], verify=str(cert)) as api:
            assert api.whoami().tenant == "vision"
        with Client(srv.url, srv.tokens["alice"]) as api, pytest.raises(ApiError) as err:
            api.whoami()  # the system's CAs do not know it
        assert err.value.status == 0 and srv.url in err.value.message
    finally:
        stop(srv)
