"""The dashboard's services in headless Chromium, against a real server running a real
service (its replica: Python's own http.server, which every tenant's user may run), with
requests going through its router all along: the overview's Services card, the service's
page (facts, replicas with their jobs, events, the live latency chart), the Stop button for
whoever may stop it and for nobody else, and stopping it from the page.

A server of its own (the ``served`` fixture is per module), so that the jobs and devices
the browser tests of test_browser.py count are not changed by the service's replica.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.dashboard.conftest import Served
from tests.dashboard.test_browser import WAIT_MS, _page

pytestmark = pytest.mark.slow

V1 = "/api/v1"
SPEC: dict[str, Any] = {
    "name": "web",
    "run": "exec /usr/bin/python3 -m http.server $ACCELNET_PORT --bind 127.0.0.1",
    "resources": {"accelerators": "L4:1"},
    "replicas": {"min": 1, "max": 2},
    # a replica not ready in 30 s (its port taken meanwhile by a process of another test
    # running beside this one, say) is given up and the next one gets another port
    "readiness": {"path": "/", "timeout_s": 30.0},
}
WEB = f"{V1}/services/web?tenant=vision"


def _load(url: str, stop: threading.Event) -> None:
    """One request after another to the service until ``stop`` (so that every window of
    its figures has some); errors (the service stopped) end nothing."""
    with httpx.Client(timeout=30) as c:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                c.get(url + "/")
            stop.wait(0.1)


@pytest.fixture(scope="module")
def scene(served: Served) -> Iterator[dict[str, Any]]:
    """Tokens (an ops admin; a user and a viewer of vision) and the service ``web`` of
    vision, started by its user, ready, and under a light load until the end; stopped at
    the end whatever happened."""
    admin = served.token("ops", "admin", "operator")
    user = served.token("vision", "user", "vic")
    viewer = served.token("vision", "viewer", "val")
    stop = threading.Event()
    with served.client(admin) as api, served.client(user) as mine:
        made = mine.post(f"{V1}/services", json=SPEC)
        assert made.status_code == 201, made.text
        try:
            end = time.monotonic() + 150
            while (body := mine.get(f"{V1}/services/web").json()).get("ready", 0) < 1:
                assert time.monotonic() < end, f"service web not ready: {body}"
                time.sleep(0.2)
            for _ in range(5):
                assert httpx.get(body["url"] + "/", timeout=30).status_code == 200
            threading.Thread(target=_load, args=(body["url"], stop), daemon=True).start()
            yield {"admin": admin, "user": user, "viewer": viewer, "api": api, "service": body}
        finally:
            stop.set()
            api.delete(WEB)  # 404 when the test stopped it already


def test_the_services_card_and_a_service_page_and_stopping_it(
    chromium: Any, served: Served, scene: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    api, service = scene["api"], scene["service"]
    replica = service["replicas"][0]
    assert replica["model"] == "L4"

    # a viewer of vision: the card lists the service, its page has no Stop button
    page, problems = _page(chromium, served, scene["viewer"])
    row = page.locator('#services-table tr[data-service="vision/web"]')
    expect(page.locator("#services-card")).to_be_visible()
    expect(row.locator("a.service-link")).to_have_text("web")
    expect(row.locator("td.replicas")).to_have_text("1/1 (1..2)")
    expect(row.locator("td.models")).to_have_text("1x L4")
    expect(row.locator("td.p50")).to_have_text(re.compile(r"^\d+(\.\d)?$"))
    expect(row.locator("td.errors")).to_have_text("0")
    expect(row.locator(".url")).to_have_text(service["url"])
    page.evaluate("window.__sameDocument = true")
    row.locator("a.service-link").click()
    expect(page).to_have_url(re.compile(r"#/services/vision/web$"))
    expect(page.locator("#service-state")).to_have_text("running")
    expect(page.locator('#service-facts dd[data-fact="url"]')).to_have_text(service["url"])
    expect(page.locator('#service-facts dd[data-fact="replicas"]')).to_contain_text("1..2")
    rep = page.locator(f'#service-replicas tr[data-replica="{replica["id"]}"]')
    expect(rep.locator("td.state")).to_have_text("ready")
    expect(rep.locator("td.job a")).to_have_text(replica["job"])
    expect(rep.locator("td.job a")).to_have_attribute("href", f"#/jobs/{replica['job']}")
    expect(page.locator('#service-events tr[data-what="ready"]').first).to_be_visible()
    # the chart: once two polls are in, with the p50 line drawn (the load never stops)
    spark = page.locator("#service-chart svg#service-spark")
    expect(spark).to_have_attribute("data-points", re.compile(r"^([2-9]|\d\d+)$"))
    expect(spark.locator("path.p50")).to_have_attribute("d", re.compile(r"^M"))
    expect(page.locator("#service-stop")).to_be_hidden()
    assert page.evaluate("window.__sameDocument") is True
    assert problems == []
    page.context.close()

    # a user of vision may stop it: the button is there (not pressed here)
    page, problems = _page(chromium, served, scene["user"])
    page.goto(f"{served.url}/#/services/vision/web")
    expect(page.locator("#service-state")).to_have_text("running")
    expect(page.locator("#service-stop")).to_be_visible()
    assert problems == []
    page.context.close()

    # an admin stops it from its page (after saying yes): back on the overview, no card
    # (a poll that crossed the stop may have met a 404: not a problem)
    page, problems = _page(chromium, served, scene["admin"], ignore=WEB.rsplit("/", 1)[1])
    expect(page.locator('#services-table tr[data-service="vision/web"]')).to_have_count(1)
    page.goto(f"{served.url}/#/services/vision/web")
    expect(page.locator("#service-state")).to_have_text("running")
    page.on("dialog", lambda d: d.accept())
    page.locator("#service-stop").click()
    expect(page).to_have_url(re.compile(r"#/$"))
    expect(page.locator("#toast")).to_contain_text("vision/web: stopped")
    assert api.get(WEB).status_code == 404
    assert api.get(f"{V1}/services").json()["services"] == []
    expect(page.locator("#services-card")).to_be_hidden()
    expect(page.locator("#overview")).to_be_visible()
    assert problems == []
    page.context.close()
