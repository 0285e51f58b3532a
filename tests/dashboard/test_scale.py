"""The dashboard at cluster scale (issue 26 items 6 and 7), in headless Chromium against a
real server of a 2,048-GPU fabric (256 hosts of 8 H100s, a fat tree): the overview opens on
the compact view, a viewport high, every device a cell grouped by pod, leaf and host; a
host's click opens its full map and filters the device table to it; the full map is drawn
when asked for; the device table is capped, filtered and sorted; the jobs are filtered; a
failed job's page opens on its stderr and lists its attempts; the history sparklines fill."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.conftest import Served, serving
from tests.dashboard.test_browser import WAIT_MS, _page

pytestmark = pytest.mark.slow

FABRIC = "fat-tree:hosts=256,gpus_per_host=8"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard-scale.png"
GPUS = 2048


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serving(tmp_path_factory.mktemp("big"), "--fabric", FABRIC, "--rate", "1000",
                       "--burst", "1000")  # fmt: skip


def test_a_2048_gpu_fabric_opens_compact_and_drills_down(chromium: Any, big: Served) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    admin = big.token("ops", "admin", "operator")
    with big.client(admin) as api:
        sent = api.post("/api/v1/jobs", json={"jobs": [
            {"name": "render-frames", "run": "sleep 600"},
            {"name": "etl-nightly", "run": "sleep 600"},
            {"name": "broken", "run": "echo 'CUDA error: out of memory' >&2; exit 3"},
        ]})  # fmt: skip
        assert sent.status_code == 201, sent.text
        ids = {j["name"]: j["id"] for j in sent.json()["jobs"]}
        page, problems = _page(chromium, big, admin)

        # the compact view: one cell per device, in a viewport-sized card; no full map yet
        heat = page.locator("#fabric-heatmap svg.heatmap")
        expect(heat).to_have_attribute("data-devices", str(GPUS))
        expect(heat.locator("rect.hm-dev")).to_have_count(GPUS)
        expect(page.locator("#fabric-map")).to_be_hidden()
        assert page.locator("#fabric-map svg").count() == 0  # drawn only when asked for
        card = page.locator("#fabric-card").bounding_box()
        assert card is not None and card["height"] < 900, card
        leaves = heat.locator("g.hm-leaf").evaluate_all("gs => gs.map(g => g.dataset.leaf)")
        assert len(leaves) == len(set(leaves)) > 1  # grouped by leaf switch
        # painted by state: the running jobs' devices are busy
        expect(heat.locator("rect.hm-dev.cond-busy")).to_have_count(2)

        # the README's picture of the compact view when ACCELNET_UPDATE_SCREENSHOT=1
        if os.environ.get("ACCELNET_UPDATE_SCREENSHOT") == "1":
            page.wait_for_timeout(1500)  # a refresh or two: the sparklines have points
            page.screenshot(path=str(SCREENSHOT))

        # the device table is capped, says so, and filters and sorts
        rows = page.locator("#device-table tbody tr")
        expect(rows).to_have_count(100)
        expect(page.locator("#device-more")).to_contain_text(f"showing 100 of {GPUS}")
        page.fill("#device-filter", "node00005/")
        expect(rows).to_have_count(8)
        page.fill("#device-filter", "")
        page.click('#device-table th[data-sort="id"]')  # sorted by id already: now descending
        expect(rows.first).to_have_attribute("data-device", "node00255/gpu7")
        page.click('#device-table th[data-sort="state"]')
        expect(rows.first).to_have_attribute("data-state", "allocated")

        # drill down: a host's full map below, the table filtered to it
        heat.locator('g.hm-host[data-host="node00007"]').click()
        expect(page.locator("#fabric-drill")).to_be_visible()
        expect(page.locator("#fabric-drill-map svg g.device")).to_have_count(8)
        expect(page.locator("#device-filter")).to_have_value("node00007/")
        expect(rows).to_have_count(8)
        page.click("#drill-close")
        expect(page.locator("#fabric-drill")).to_be_hidden()

        # the full map on demand, and back
        page.click("#fabric-full")
        expect(page.locator("#fabric-map svg g.device")).to_have_count(GPUS)
        page.click("#fabric-compact")
        expect(page.locator("#fabric-map")).to_be_hidden()

        # jobs: a filter over the queue and the finished ones
        queue = page.locator("#queue-table tbody tr[data-job]")
        expect(queue).to_have_count(2)
        page.fill("#job-filter", "etl")
        expect(queue).to_have_count(1)
        expect(queue.first).to_have_attribute("data-job", ids["etl-nightly"])
        page.fill("#job-filter", "")

        # history: a point per refresh since the page opened
        spark = page.locator("#hist-busy svg")
        expect(spark).to_have_attribute("data-points", re.compile(r"^[1-9]\d*$"))
        seen = int(spark.get_attribute("data-points") or 0)
        expect(spark).not_to_have_attribute("data-points", str(seen))  # it grows

        # a failed job's page opens on its stderr, its attempts listed
        page.goto(f"{big.url}/#/jobs/{ids['broken']}")
        expect(page.locator("#job-state")).to_have_text("failed")
        expect(page.locator("#log-stream")).to_have_value("err")
        expect(page.locator("#job-log")).to_contain_text("CUDA error: out of memory")
        expect(page.locator("#log-attempt option")).to_have_count(2)  # latest, 1
        error = page.locator("#job-error").inner_text()
        assert "(log: attempt 1, rank 0, stderr)" in error and str(big.tmp) not in error
        assert problems == []
        page.context.close()
        for jid in ids.values():
            api.post(f"/api/v1/jobs/{jid}/cancel")
