"""Real-time video as a service on an emulated heterogeneous lab: camera streams played at
their frame rate through accelnet's router to motion-detection replicas, each frame answered
annotated; the latency of every frame reported, and the annotated frames of the first
camera written as a GIF.

    python examples/serve/video.py                       # 4 cameras, 10 s at 10 fps
    python examples/serve/video.py --cameras 8 --out /tmp/video

Each camera sends its frames with ``X-Accelnet-Affinity: <camera>``, so its frames reach
the one replica that holds its background model. The service grows with the number of
cameras (``goal.p95_ms``); a frame is late when it takes longer than the frame interval.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from PIL import Image

from accelnet.runtime.sdk import LocalCluster
from accelnet.workloads.video import synthetic_stream

W, H = 192, 144


def spec(goal_ms: float) -> dict[str, object]:
    return {
        "name": "video",
        "run": f"{sys.executable} -m accelnet.workloads.video_service --base-ms 20",
        "resources": {"accelerators": {"any_of": ["H100-SXM", "L4", "T4"], "count": 1}},
        "replicas": {"min": 1, "max": 4},
        "goal": {"p95_ms": goal_ms, "target_inflight": 1},
        "scaling": {"up_s": 0.5, "down_s": 3, "window_s": 2},
    }


def camera(url: str, name: str, seconds: float, fps: int, out: list[tuple[float, int]],
           frames: list[Image.Image] | None) -> None:  # fmt: skip
    """Play one camera at ``fps``: (latency s, status) per frame into ``out``."""
    start = time.monotonic()
    with httpx.Client(timeout=30) as http:
        for frame in synthetic_stream(int(seconds * fps), W, H, fps=fps, seed=hash(name) % 997):
            time.sleep(max(0.0, start + frame.index / fps - time.monotonic()))
            t0 = time.monotonic()
            r = http.post(f"{url}/frames", content=frame.pixels.tobytes(),
                          params={"stream": name, "width": W, "height": H},
                          headers={"X-Accelnet-Affinity": name})  # fmt: skip
            out.append((time.monotonic() - t0, r.status_code))
            if frames is not None and r.status_code == 200 and frame.index % 3 == 0:
                frames.append(Image.open(io.BytesIO(r.content)).copy())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cameras", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--fps", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "accelnet-video")
    args = ap.parse_args()
    goal_ms = 1000.0 / args.fps  # a frame must be done before the next one comes
    with tempfile.TemporaryDirectory() as work, LocalCluster("mixed-lab", workdir=work) as c, \
            c.serve(spec(goal_ms)) as svc:  # fmt: skip
        while svc.ready_count() < 1:
            time.sleep(0.1)
        print(f"service at {svc.url}; {args.cameras} cameras at {args.fps} fps "
              f"(p95 goal {goal_ms:.0f} ms)")  # fmt: skip
        results: list[tuple[float, int]] = []
        frames: list[Image.Image] = []
        threads = [threading.Thread(target=camera, args=(svc.url, f"cam{i}", args.seconds,
                                                         args.fps, results,
                                                         frames if i == 0 else None))
                   for i in range(args.cameras)]  # fmt: skip
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(1)
            st = svc.stats()
            models = sorted(str(r.model) for r in svc.router.replicas())
            p95 = "-" if st.p95_ms is None else f"{st.p95_ms:.0f} ms"
            print(f"  replicas {models}  {st.rate:5.1f} frames/s  p95 {p95}")
    ok = sorted(1e3 * s for s, code in results if code == 200)
    q = statistics.quantiles(ok, n=100) if len(ok) > 2 else [float("nan")] * 99
    late = sum(1 for x in ok if x > goal_ms)
    print(f"{len(results)} frames, {len(ok)} answered; latency per frame p50 {q[49]:.1f} ms, "
          f"p95 {q[94]:.1f} ms, p99 {q[98]:.1f} ms; {late} late (> {goal_ms:.0f} ms)")  # fmt: skip
    if frames:
        args.out.mkdir(parents=True, exist_ok=True)
        gif = args.out / "cam0.gif"
        frames[0].save(gif, save_all=True, append_images=frames[1:], duration=200, loop=0)
        print(f"annotated frames of cam0: {gif}")


if __name__ == "__main__":
    main()
