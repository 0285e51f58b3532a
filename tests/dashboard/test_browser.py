"""The dashboard in headless Chromium, against a real server with real jobs.

One server (mixed-lab: 5 hosts, 18 devices, 3 switches) and a few jobs that hold their
devices until the test lets them go (they wait for a file), so that every check sees a
known state without waiting on time: the fabric map, the device table, the job queue with
a waiting job's reason, tenants' use against quota, a job's page with its timeline and
log; then a job finishes and the page shows it without a reload. Writes the screenshot
shown in the README (docs/dashboard.png) when ACCELNET_UPDATE_SCREENSHOT=1.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.conftest import Served

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "dashboard.png"
SCRATCH_SHOT = Path(tempfile.gettempdir()) / "accelnet-dashboard-test.png"
WAIT_MS = 15_000


def hold(flag: Path, first: str, last: str) -> str:
    """A shell command: print ``first``, wait until ``flag`` exists, print ``last``."""
    return f'echo "{first}"; while [ ! -e "{flag}" ]; do sleep 0.05; done; echo "{last}"'


@pytest.fixture(scope="module")
def scene(served: Served) -> Iterator[dict[str, Any]]:
    """Tokens, tenants with quotas, and jobs: ``train`` (ops, both Jetsons, running until
    ``go`` exists), ``waiter`` (ops, one Jetson: waits for ``train``), ``vision-train``
    (vision, 4 H100) and ``speech-serve`` (speech, half an L4), which run until the end."""
    admin = served.token("ops", "admin", "operator")
    viewer = served.token("vision", "viewer", "val")
    go, end = served.tmp / "go", served.tmp / "end"
    with served.client(admin) as api:
        for name, quota in (("vision", {"H100-SXM": 8, "L4": 2}), ("speech", {"*": 2})):
            assert api.put(f"/api/v1/tenants/{name}", json={"quota": quota}).status_code == 200
        jobs = [
            {"name": "train", "resources": {"accelerators": "Jetson-AGX-Orin:2"},
             "run": hold(go, "epoch 1 loss 0.93 on rank $ACCELNET_RANK", "epoch 2 loss 0.41")},
            {"name": "waiter", "resources": {"accelerators": "Jetson-AGX-Orin:1"},
             "run": "echo waited"},
            {"name": "vision-train", "tenant": "vision",
             "resources": {"accelerators": "H100-SXM:4"}, "topology": {"required": "nvlink"},
             "run": hold(end, "training", "stopped")},
            {"name": "speech-serve", "tenant": "speech",
             "resources": {"accelerators": "L4:0.5"}, "run": hold(end, "serving", "stopped")},
        ]  # fmt: skip
        r = api.post("/api/v1/jobs", json={"jobs": jobs})
        assert r.status_code == 201, r.text
        ids = {j["name"]: j["id"] for j in r.json()["jobs"]}
        yield {"admin": admin, "viewer": viewer, "go": go, "end": end, "ids": ids, "api": api}
        end.touch()
        go.touch()


def _page(
    browser: Any, served: Served, token: str, ignore: str = "/metrics", metrics: str | None = None
) -> tuple[Any, list[str]]:
    """A fresh page (its own session storage), signed in with ``token``; the list gets
    every console error (but for failed loads of a URL ending in ``ignore`` or
    ``/metrics``), page error and request to anywhere but the server. ``metrics``: what
    ``/metrics`` answers (the server's own answer otherwise)."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    if metrics is not None:
        page.route(
            f"{served.url}/metrics",
            lambda route: route.fulfill(status=200, content_type="text/plain", body=metrics),
        )
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def console(m: Any) -> None:
        # Chromium reports every answer >= 400 as an error; /metrics is looked at for link
        # readings and may not be there (404) or not for this token (401)
        url = str((m.location or {}).get("url", ""))
        if m.type == "error" and not (url.endswith("/metrics") or url.endswith(ignore)):
            problems.append(f"console {m.type}: {m.text} ({url})")

    page.on("console", console)
    page.on(
        "request",
        lambda r: None if r.url.startswith(served.url) else problems.append(f"request {r.url}"),
    )
    page.goto(served.url + "/")
    page.fill("#token-input", token)
    page.click("#login-form button[type=submit]")
    return page, problems


def test_dashboard_shows_the_cluster_live(
    chromium: Any, served: Served, scene: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    api, ids = scene["api"], scene["ids"]
    fabric = api.get("/api/v1/fabric").json()
    devices = {d["id"] for h in fabric["hosts"] for d in h["devices"]}
    assert len(devices) == 18

    # a wrong token is refused with the server's reason
    page, problems = _page(chromium, served, "acn_000000000000_" + "0" * 64)
    expect(page.locator("#login-error")).to_contain_text("invalid or revoked token")
    page.context.close()

    page, problems = _page(chromium, served, scene["admin"])
    expect(page.locator("#whoami")).to_contain_text("ops · admin")
    expect(page.locator("#live-status")).to_have_attribute("data-live", "live")

    # the fabric map: every host box, device node and switch of the served fabric
    svg = page.locator("#fabric-map svg")
    expect(svg).to_have_attribute("data-fabric", "mixed-lab")
    drawn_hosts = svg.locator("g.host").evaluate_all("gs => gs.map(g => g.dataset.host)")
    assert sorted(drawn_hosts) == sorted(h["name"] for h in fabric["hosts"])
    expect(svg.locator("g.device")).to_have_count(len(devices))
    drawn = svg.locator("g.device").evaluate_all("gs => gs.map(g => g.dataset.device)")
    assert set(drawn) == devices
    for sw in fabric["switches"]:
        expect(svg.locator(f'g.switch[data-switch="{sw["id"]}"]')).to_have_count(1)
    # links: each inside a host or between switches; a host's links to one switch as one
    host_of = {n["id"]: h["name"] for h in fabric["hosts"] for n in h["devices"] + h["switches"]}
    inner = sum(len(h["links"]) for h in fabric["hosts"])
    crossing = [x for x in fabric["links"] if (x["a"] in host_of) != (x["b"] in host_of)]
    uplinks = {
        (host_of[x["a"]], x["b"]) if x["a"] in host_of else (host_of[x["b"]], x["a"])
        for x in crossing
    }
    expect(svg.locator("g.links path.link")).to_have_count(
        inner + len(fabric["links"]) - len(crossing)
    )
    expect(svg.locator("g.ext-links path.link")).to_have_count(len(uplinks))
    for host, switch in uplinks:
        expect(svg.locator(f'path[data-host="{host}"][data-switch="{switch}"]')).to_have_count(1)
    # coloured by state: the running job's devices are busy, an idle one is idle
    expect(svg.locator('g.device[data-device="jetson0/gpu0"]')).to_have_class(
        re.compile(r"cond-busy")
    )
    expect(svg.locator('g.device[data-device="t4box/gpu0"]')).to_have_class(
        re.compile(r"cond-idle")
    )

    # the device table: a row per device, with state, health, power and temperature
    rows = page.locator("#device-table tbody tr")
    expect(rows).to_have_count(len(devices))
    head = page.locator("#device-table thead").inner_text()
    for column in ("state", "health", "util", "power", "temp"):
        assert column in head
    jetson = page.locator('#device-table tr[data-device="jetson0/gpu0"]')
    expect(jetson.locator("td.state")).to_have_text("allocated")
    expect(jetson.locator("td.jobs")).to_have_text(ids["train"])
    expect(page.locator('#device-table tr[data-device="t4box/gpu1"] td.state')).to_have_text(
        "ready"
    )
    expect(page.locator('#device-table tr[data-device="t4box/gpu1"] td.health')).to_have_text(
        "pass"
    )
    expect(page.locator("#device-table button.drain")).to_have_count(len(devices))  # admin

    # the job queue: the running jobs where they run, the waiting one with its reason
    queue = page.locator("#queue-table")
    train = queue.locator(f'tr[data-job="{ids["train"]}"]')
    expect(train).to_have_attribute("data-state", "running")
    expect(train).to_contain_text("jetson0/gpu0, jetson1/gpu0")
    waiter = queue.locator(f'tr[data-job="{ids["waiter"]}"]')
    expect(waiter.locator(".reason")).to_contain_text("needs 1 x Jetson-AGX-Orin")
    expect(queue.locator(f'tr[data-job="{ids["vision-train"]}"]')).to_have_attribute(
        "data-state", "running"
    )

    # tenants: use against quota
    vision = page.locator('#tenants [data-tenant="vision"] tr[data-model="H100-SXM"] td.usage')
    expect(vision).to_have_text("4 / 8")
    speech = page.locator('#tenants [data-tenant="speech"] tr[data-model="*"] td.usage')
    tenants = {t["name"]: t for t in api.get("/api/v1/tenants").json()["tenants"]}
    assert tenants["speech"]["usage"]["*"] == 0.5
    expect(speech).to_have_text("0.5 / 2")

    # the overview with live data: the README's picture when ACCELNET_UPDATE_SCREENSHOT=1,
    # else a scratch copy (a test run must not change tracked files)
    shot = SCREENSHOT if os.environ.get("ACCELNET_UPDATE_SCREENSHOT") == "1" else SCRATCH_SHOT
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # a job's page: its facts, its timeline, its log
    page.evaluate("window.__sameDocument = true")
    train.locator("a.job-link").click()
    expect(page).to_have_url(re.compile(rf"#/jobs/{ids['train']}$"))
    expect(page.locator("#job-state")).to_have_text("running")
    expect(page.locator('#job-facts dd[data-fact="devices"]')).to_have_text(
        "jetson0/gpu0, jetson1/gpu0"
    )
    timeline = page.locator("#job-timeline tbody")
    for kind in ("job:pending", "job:admitted", "job:starting", "job:running"):
        expect(timeline.locator(f'tr[data-kind="{kind}"]')).to_have_count(1)
    expect(page.locator("#job-timeline-bar .seg.st-running")).to_have_count(1)
    expect(page.locator("#job-log")).to_have_text("epoch 1 loss 0.93 on rank 0\n")
    expect(page.locator("#job-cancel")).to_be_visible()

    # live: the job finishes; the page follows without a reload
    scene["go"].touch()
    expect(page.locator("#job-state")).to_have_text("succeeded")
    expect(timeline.locator('tr[data-kind="job:succeeded"]')).to_have_count(1)
    expect(page.locator("#job-log")).to_have_text(
        "epoch 1 loss 0.93 on rank 0\nepoch 2 loss 0.41\n"
    )
    expect(page.locator("#job-cancel")).to_be_hidden()
    page.select_option("#log-rank", "1")
    expect(page.locator("#job-log")).to_contain_text("on rank 1")
    assert page.evaluate("window.__sameDocument") is True

    # back on the overview, the waiting job has started in its turn (or already ended)
    page.click("a.brand")
    waiter = page.locator(f'tr[data-job="{ids["waiter"]}"]')  # in the queue or the recent
    expect(waiter).to_have_attribute("data-state", re.compile("starting|running|succeeded"))
    assert page.evaluate("window.__sameDocument") is True

    # an admin drains a device and puts it back (after saying yes); the audit log has both
    page.on("dialog", lambda d: d.accept())
    row = page.locator('#device-table tr[data-device="t4box/gpu3"]')
    row.locator("button.drain").click()
    expect(row).to_have_attribute("data-state", "drained")
    expect(row.locator("td.state")).to_contain_text("held")  # the remediation phase, too
    expect(svg.locator('g.device[data-device="t4box/gpu3"]')).to_have_class(
        re.compile(r"cond-drained")
    )
    row.locator("button.undrain").click()
    expect(row).to_have_attribute("data-state", "ready")
    audit = [e["path"] for e in api.get("/api/v1/audit").json()["entries"]]
    assert "/api/v1/devices/t4box/gpu3/drain" in audit
    assert "/api/v1/devices/t4box/gpu3/undrain" in audit
    assert problems == []
    page.context.close()


def test_a_viewer_sees_its_tenant_and_no_buttons(
    chromium: Any, served: Served, scene: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    ids = scene["ids"]
    page, problems = _page(chromium, served, scene["viewer"], ignore=ids["speech-serve"])
    expect(page.locator("#whoami")).to_contain_text("vision · viewer")
    expect(page.locator("#device-table tbody tr")).to_have_count(18)
    expect(page.locator("#device-table button")).to_have_count(0)
    expect(page.locator(f'#queue-table tr[data-job="{ids["vision-train"]}"]')).to_have_count(1)
    expect(page.locator(f'#queue-table tr[data-job="{ids["speech-serve"]}"]')).to_have_count(0)
    expect(page.locator("#tenants [data-tenant]")).to_have_count(1)
    page.goto(f"{served.url}/#/jobs/{ids['vision-train']}")
    expect(page.locator("#job-state")).to_have_text("running")
    expect(page.locator("#job-cancel")).to_be_hidden()
    # another tenant's job does not exist for a viewer
    page.goto(f"{served.url}/#/jobs/{ids['speech-serve']}")
    expect(page.locator("#job-state")).to_have_text("not found")
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0
    assert problems == []
    page.context.close()


LINK_METRICS = """\
# HELP accelnet_link_utilization used / capacity of one direction of one link
# TYPE accelnet_link_utilization gauge
accelnet_link_utilization{src="h100box/gpu0",dst="h100box/nvswitch",lane="0"} 0.75
accelnet_link_utilization{src="h100box/nvswitch",dst="h100box/gpu0",lane="0"} 0.5
accelnet_link_utilization{src="h100box/nic0",dst="ib-leaf",lane="0"} 0.2
"""


def test_links_are_coloured_by_their_utilization_when_metrics_has_it(
    chromium: Any, served: Served, scene: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    page, problems = _page(chromium, served, scene["admin"], metrics=LINK_METRICS)

    def link(a: str, b: str) -> Any:
        return page.locator(f'#fabric-map path.link[data-a="{a}"][data-b="{b}"]')

    def uplink(host: str, switch: str) -> Any:
        return page.locator(f'#fabric-map path[data-host="{host}"][data-switch="{switch}"]')

    # the busier direction of the two; a host's links to a switch: the busiest of them
    expect(link("h100box/gpu0", "h100box/nvswitch")).to_have_attribute("data-utilization", "0.75")
    expect(uplink("h100box", "ib-leaf")).to_have_attribute("data-utilization", "0.2")
    expect(uplink("h100box", "ib-leaf")).to_have_attribute("data-links", "2")
    expect(uplink("t4box", "eth-sw")).to_have_attribute("data-utilization", "0")
    expect(page.locator("#fabric-legend")).to_contain_text("links (utilization)")
    assert problems == []
    page.context.close()
