"""Real-time video as a service: frames in, annotated frames out.

``python -m accelnet.workloads.video_service`` serves on ``$ACCELNET_BIND:$PORT`` (accelnet
gives a service's replicas ``ACCELNET_PORT`` and ``PORT``, and on Ray their node's address
as ``ACCELNET_BIND``; 127.0.0.1 without it; ``--port`` overrides):

- ``POST /frames?stream=S&width=W&height=H`` with a frame's grey pixels (``W*H`` bytes,
  row by row) answers the frame annotated with the boxes of what moves in it (a PNG), the
  boxes in ``X-Boxes`` (JSON ``[[x0, y0, x1, y1], ...]``) and the time it took in
  ``X-Process-Ms``. Each stream ``S`` has its own :class:`~accelnet.workloads.video.
  MotionDetector` (its running background), so a stream's frames must reach the same
  replica: send them with ``X-Accelnet-Affinity: S`` and accelnet's router keeps them on
  one (at most ``--streams`` streams are kept per replica, the least recently seen
  dropped).
- ``GET /live?frames=N&width=W&height=H&fps=F&seed=K`` streams the replica's own synthetic
  camera, processed as it plays (one frame every ``1/F`` s): one JSON line per frame
  (``index``, ``boxes``, ``truth``, ``process_ms``), sent as soon as the frame is done (a
  chunked answer the router passes through as it comes).
- ``GET /healthz``.

On an emulated device (``ACCELNET_EMULATED=1``) each frame also holds the device for
``--base-ms`` scaled by the device model's speed (as ``digits_service`` does), one frame at
a time: an emulated H100 keeps up with more streams than a T4.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
from collections import OrderedDict
from typing import Any

from accelnet.workloads._common import serve_app, service_args

MAX_SIDE = 1920
LIVE_MAX_FRAMES = 10_000


class _Detectors:
    """One motion detector per stream (its running background), the ``keep`` most recently
    seen kept."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._by: OrderedDict[tuple[str, int, int], Any] = OrderedDict()

    def get(self, stream: str, width: int, height: int) -> Any:
        from accelnet.workloads.video import MotionDetector  # noqa: PLC0415

        key = (stream, width, height)
        found = self._by.pop(key, None)
        if found is None:
            found = MotionDetector(width, height)
        self._by[key] = found  # most recently seen last
        while len(self._by) > self.keep:
            self._by.popitem(last=False)
        return found


def _size(params: Any) -> tuple[int, int] | str:
    """``width`` x ``height`` from the query, or what is wrong with them."""
    try:
        w, h = int(params.get("width", "0")), int(params.get("height", "0"))
    except ValueError:
        return "width and height: whole numbers"
    if not (8 <= w <= MAX_SIDE and 8 <= h <= MAX_SIDE):
        return f"width and height: 8 to {MAX_SIDE} pixels, got {w} x {h}"
    return w, h


def _live_args(params: Any) -> tuple[int, int, int] | str:
    """``frames``, ``fps`` and ``seed`` of a live stream, or what is wrong with them."""
    try:
        n, fps = int(params.get("frames", "30")), int(params.get("fps", "30"))
        seed = int(params.get("seed", "0"))
    except ValueError:
        return "frames, fps, seed: whole numbers"
    if not (1 <= n <= LIVE_MAX_FRAMES and 1 <= fps <= 240):
        return f"frames 1..{LIVE_MAX_FRAMES}, fps 1..240"
    return n, fps, seed


def make_app(base_ms: float, streams: int) -> Any:
    """The Starlette app."""
    import numpy as np  # noqa: PLC0415
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import (  # noqa: PLC0415
        JSONResponse,
        PlainTextResponse,
        Response,
        StreamingResponse,
    )
    from starlette.routing import Route  # noqa: PLC0415

    from accelnet.workloads.digits_service import service_seconds  # noqa: PLC0415
    from accelnet.workloads.video import MotionDetector, annotated, synthetic_stream  # noqa: PLC0415

    model_name = os.environ.get("ACCELNET_DEVICE_MODEL")
    emulated = os.environ.get("ACCELNET_EMULATED") == "1"
    hold = service_seconds(base_ms, model_name) if emulated else 0.0
    busy = asyncio.Lock()
    detectors = _Detectors(streams)

    async def process(det: Any, pixels: Any) -> tuple[list[Any], float]:
        async with busy:  # one frame at a time on the device
            t0 = time.perf_counter()
            boxes = det.process(pixels)
            if hold:
                await asyncio.sleep(hold)
            return boxes, (time.perf_counter() - t0) * 1e3

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def frames(request: Request) -> Response:
        wh = _size(request.query_params)
        if isinstance(wh, str):
            return JSONResponse({"error": wh}, 422)
        w, h = wh
        body = await request.body()
        if len(body) != w * h:
            return JSONResponse({"error": f"a {w} x {h} frame is {w * h} bytes, got "
                                          f"{len(body)}"}, 422)  # fmt: skip
        pixels = np.frombuffer(body, dtype=np.uint8).reshape(h, w)
        stream = request.query_params.get("stream", "")[:128]
        boxes, took = await process(detectors.get(stream, w, h), pixels)
        png = io.BytesIO()
        annotated(pixels, boxes).save(png, format="PNG")
        return Response(png.getvalue(), media_type="image/png",
                        headers={"x-boxes": json.dumps([list(b) for b in boxes]),
                                 "x-process-ms": f"{took:.3f}"})  # fmt: skip

    async def live(request: Request) -> Response:
        wh, args = _size(request.query_params), _live_args(request.query_params)
        if isinstance(wh, str) or isinstance(args, str):
            return JSONResponse({"error": wh if isinstance(wh, str) else args}, 422)
        (w, h), (n, fps, seed) = wh, args

        async def lines() -> Any:
            det = MotionDetector(w, h, fps=fps)
            start = time.perf_counter()
            for frame in synthetic_stream(n, w, h, fps=fps, seed=seed):
                due = start + frame.index / fps  # the camera's pace
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                boxes, took = await process(det, frame.pixels)
                yield json.dumps({"index": frame.index, "boxes": [list(b) for b in boxes],
                                  "truth": [list(b) for b in frame.truth],
                                  "process_ms": round(took, 3)}) + "\n"  # fmt: skip

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    return Starlette(routes=[Route("/healthz", healthz),
                             Route("/frames", frames, methods=["POST"]),
                             Route("/live", live)])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Serve until stopped."""
    p = service_args(__doc__.split("\n")[0])
    p.add_argument(
        "--base-ms",
        type=float,
        default=10.0,
        help="ms per frame on a 100 TFLOP/s device, when emulated (default 10)",
    )
    p.add_argument(
        "--streams",
        type=int,
        default=64,
        help="streams whose background each replica keeps (default 64)",
    )
    args = p.parse_args(argv)
    app = make_app(args.base_ms, args.streams)
    serve_app(app, args.port)


if __name__ == "__main__":
    main()
