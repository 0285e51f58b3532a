"""Property-based API test: schemathesis generates requests from the published
/openapi.json (25 examples per operation, valid and invalid ones, an admin token) against
a real server; none may get a 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error

from tests.api.conftest import Server, spawn

EXAMPLES = 25


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose devices are all drained first: generated jobs queue, never run."""
    srv = spawn(
        tmp_path_factory.mktemp("fuzz"),
        "--fabric",
        "pcie-4xL4",
        "--rate",
        "0",
        "--log-level",
        "warning",
    )
    with srv.client("admin") as c:
        for dev in c.get("/api/v1/devices").json()["devices"]:
            assert c.post(f"/api/v1/devices/{dev['id']}/drain").status_code == 202
    yield srv
    srv.stop()


@pytest.mark.parametrize(
    "mode", [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
)
def test_no_server_errors_on_generated_requests(
    quiet_server: Server, mode: schemathesis.GenerationMode
) -> None:
    schema = schemathesis.openapi.from_url(f"{quiet_server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {quiet_server.tokens['admin']}"}
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 20
    failures: list[str] = []
    for op in operations:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(generation_mode=mode, headers=headers))
        def check(case: schemathesis.Case) -> None:
            response = case.call(base_url=quiet_server.url, timeout=30)
            case.validate_response(response, checks=[not_a_server_error])

        try:
            check()
        except Unsatisfiable:  # nothing invalid to send (an operation without parameters)
            assert mode is schemathesis.GenerationMode.NEGATIVE
        except Exception as exc:  # every operation's failure, not only the first
            failures.append(f"{op.label}: {str(exc)[:2000]}")
    assert not failures, "\n\n".join(failures)
    with quiet_server.client(None) as c:
        assert c.get("/healthz").json()["status"] == "ok"
