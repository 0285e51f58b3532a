"""The real-time video workload as a service on emulated ``mixed-lab``: two camera streams'
frames posted through the router, each stream kept on one replica by its affinity key,
every frame answered annotated (a PNG of its size) with the boxes of what moves, which
find the objects; and the live camera streamed through the router line by line."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import httpx
import pytest
from PIL import Image

from accelnet.runtime.sdk import LocalCluster
from accelnet.workloads.video import synthetic_stream
from tests.serve.test_service import wait_for

pytestmark = pytest.mark.slow

W, H, FRAMES = 160, 120, 45
SPEC = {
    "name": "video",
    "run": f"{sys.executable} -m accelnet.workloads.video_service --base-ms 5",
    "resources": {"accelerators": {"any_of": ["H100-SXM", "L4", "T4"], "count": 1}},
    "replicas": {"min": 2, "max": 2},
}


def _overlaps(a: list[int], b: list[int]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_frames_in_annotated_frames_out_each_stream_on_one_replica(tmp_path: Path) -> None:
    with LocalCluster("mixed-lab", workdir=tmp_path / "work") as cluster, \
            cluster.serve(SPEC) as svc, httpx.Client(timeout=60) as http:  # fmt: skip
        wait_for(lambda: svc.ready_count() == 2, "two replicas")
        latencies_ms: list[float] = []
        for camera in ("cam-a", "cam-b", "cam-c"):
            seed = ord(camera[-1])
            replicas, found = set(), 0
            for frame in synthetic_stream(FRAMES, W, H, fps=30, seed=seed):
                r = http.post(f"{svc.url}/frames", content=frame.pixels.tobytes(),
                              params={"stream": camera, "width": W, "height": H},
                              headers={"X-Accelnet-Affinity": camera})  # fmt: skip
                assert r.status_code == 200, r.text
                assert Image.open(io.BytesIO(r.content)).size == (W, H)
                latencies_ms.append(r.elapsed.total_seconds() * 1e3)
                replicas.add(r.headers["x-accelnet-replica"])
                boxes = json.loads(r.headers["x-boxes"])
                assert float(r.headers["x-process-ms"]) >= 0
                truth = [list(t) for t in frame.truth]
                if frame.index >= 10 and any(_overlaps(b, t) for b in boxes for t in truth):
                    found += 1
            assert len(replicas) == 1, f"{camera} moved between replicas: {replicas}"
            assert found >= (FRAMES - 10) // 2, f"{camera}: objects found in {found} frames"
        assert len(latencies_ms) == 3 * FRAMES
        st = svc.stats(60.0)
        assert st.errors == 0 and st.p95_ms is not None  # the router's per-frame figures

        bad = http.post(f"{svc.url}/frames", content=b"x" * 10,
                        params={"stream": "s", "width": W, "height": H})  # fmt: skip
        assert bad.status_code == 422 and f"{W * H} bytes" in bad.text

        # the replica's own camera, processed at its pace and streamed through the router
        chunks: list[bytes] = []
        with http.stream(
            "GET", f"{svc.url}/live", params={"frames": 20, "fps": 30, "width": W, "height": H}
        ) as live:
            assert live.status_code == 200
            chunks.extend(live.iter_raw())  # fmt: skip
        lines = [json.loads(x) for x in b"".join(chunks).decode().splitlines()]
        assert [x["index"] for x in lines] == list(range(20))
        assert len(chunks) >= 2  # passed through as it came, not gathered first
