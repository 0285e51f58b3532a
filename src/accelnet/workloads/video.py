"""Real-time video stream processing: motion detection on a synthetic camera stream.

:func:`synthetic_stream` plays a fixed camera over a textured background with sensor
noise and a slow illumination drift, while a few bright or dark shapes move across it and
bounce off the edges; it knows every object's true bounding box. :class:`MotionDetector`
processes frames one at a time as they arrive: absolute difference against a running
background, threshold, morphological cleanup (opening, closing, hole filling), connected
components, and a bounding box per component.

The background is a per-pixel running average, updated only where no motion is seen.
Two rules keep it honest. A region whose outline is an edge in the background but not in
the current frame is a *ghost* (the place an object stood when the background was
learnt, e.g. in the first frame): it is learnt at once and not reported. A pixel that
stays foreground for ``absorb_s`` seconds is absorbed, so an object that stops joins the
background after that long.

:func:`detect_motion` runs both over a stream, times every frame and writes (through a
:class:`MotionRecorder`) an annotated ``motion.gif``, a ``strip.png`` of eight frames and
``detections.csv``.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image
from scipy import ndimage

from accelnet.workloads._common import Summary, check_positive, prepare_out_dir, write_json

Box = tuple[int, int, int, int]
"""``(x0, y0, x1, y1)`` in pixels, ``x1`` and ``y1`` exclusive."""
Gray = npt.NDArray[np.uint8]

OBJECTS = 3
NOISE_SIGMA = 5.0
DRIFT_LEVELS = 6.0  # amplitude of the illumination drift, in grey levels
DRIFT_PERIOD_S = 5.0
GIF_BUDGET_BYTES = 1_900_000
GIF_BYTES_PER_PIXEL = 0.55  # measured: LZW of 64 noisy greys; the GIF is re-cut if over
GIF_MAX_FRAMES = 120
STRIP_FRAMES = 8
MIN_SIDE = 8
GHOST_EDGE_RATIO = 0.5  # a region is a ghost if its outline is this much weaker now
# GIF palette: 64 grey levels (6 bits), then the box colour
_GREYS = 64
_BOX_INDEX = _GREYS
_BOX_RGB = (40, 255, 60)


@dataclass(frozen=True)
class Frame:
    """One frame of the stream: its index, pixels (``uint8``, ``(height, width)``), truth."""

    index: int
    pixels: Gray
    truth: tuple[Box, ...]


@dataclass(frozen=True)
class _Mover:
    shape: str  # "disc" or "box"
    radius: float
    level: float
    x: float
    y: float
    vx: float  # px per frame
    vy: float


def _background(width: int, height: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    scale = min(width, height)
    blotches: npt.NDArray[np.float64] = ndimage.gaussian_filter(
        rng.random((height, width)), sigma=scale / 24.0
    )
    blotches = (blotches - blotches.min()) / max(float(np.ptp(blotches)), 1e-12)
    grain: npt.NDArray[np.float64] = ndimage.gaussian_filter(rng.random((height, width)), sigma=1.0)
    grain = (grain - grain.mean()) / max(float(grain.std()), 1e-12)
    ramp = (np.arange(width)[None, :] / width + np.arange(height)[:, None] / height) / 2.0
    texture: npt.NDArray[np.float64] = 80.0 + 70.0 * blotches + 20.0 * ramp + 6.0 * grain
    return texture


def _movers(width: int, height: int, fps: int, rng: np.random.Generator) -> list[_Mover]:
    scale = min(width, height)
    movers = []
    for k in range(OBJECTS):
        radius = scale * rng.uniform(0.05, 0.08)
        speed = scale * rng.uniform(0.3, 0.55) / fps  # px per frame
        angle = rng.uniform(0.0, 2.0 * math.pi)
        movers.append(
            _Mover(
                shape="disc" if k % 2 == 0 else "box",
                radius=radius,
                level=rng.uniform(215.0, 245.0) if k % 3 != 1 else rng.uniform(10.0, 30.0),
                x=rng.uniform(radius + 1, width - radius - 1),
                y=rng.uniform(radius + 1, height - radius - 1),
                vx=speed * math.cos(angle),
                vy=speed * math.sin(angle),
            )
        )
    return movers


def _bounce(pos: float, vel: float, radius: float, size: int) -> tuple[float, float]:
    lo, hi = radius, size - radius
    pos += vel
    if pos < lo:
        pos, vel = 2 * lo - pos, -vel
    elif pos > hi:
        pos, vel = 2 * hi - pos, -vel
    return pos, vel


def check_stream(frames: int, width: int, height: int, fps: int) -> None:
    check_positive(frames=frames, fps=fps)
    if min(width, height) < MIN_SIDE:
        raise ValueError(f"width and height must be >= {MIN_SIDE}, got {width}x{height}")


def synthetic_stream(
    frames: int, width: int, height: int, fps: int = 30, seed: int = 0
) -> Iterator[Frame]:
    """Frames ``0 .. frames-1`` of a seeded synthetic camera stream, generated lazily.

    Deterministic for the arguments. Each :class:`Frame` carries the true bounding box of
    every object (objects stay wholly in view; they may overlap one another). Sizes and
    speeds scale with ``min(width, height)``; speeds are per second, so a higher ``fps``
    moves objects less per frame. Raises ``ValueError`` (at once, not on first use) for a
    side below 8 pixels or non-positive ``frames`` or ``fps``.
    """
    check_stream(frames, width, height, fps)
    return _stream(frames, width, height, fps, seed)


def _stream(frames: int, width: int, height: int, fps: int, seed: int) -> Iterator[Frame]:
    rng = np.random.default_rng(seed)
    background = _background(width, height, rng)
    movers = _movers(width, height, fps, rng)
    yy, xx = np.mgrid[0:height, 0:width]
    for index in range(frames):
        drift = DRIFT_LEVELS * math.sin(2.0 * math.pi * index / (fps * DRIFT_PERIOD_S))
        image = background + drift
        truth = []
        for m in movers:
            if m.shape == "disc":
                mask = (xx - m.x) ** 2 + (yy - m.y) ** 2 <= m.radius**2
            else:
                mask = (np.abs(xx - m.x) <= m.radius) & (np.abs(yy - m.y) <= m.radius)
            image[mask] = m.level + drift
            rows, cols = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
            truth.append((int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1))
        image += rng.normal(0.0, NOISE_SIGMA, size=image.shape)
        pixels = np.clip(np.round(image), 0, 255).astype(np.uint8)
        yield Frame(index=index, pixels=pixels, truth=tuple(truth))
        for i, m in enumerate(movers):
            x, vx = _bounce(m.x, m.vx, m.radius, width)
            y, vy = _bounce(m.y, m.vy, m.radius, height)
            movers[i] = _Mover(m.shape, m.radius, m.level, x, y, vx, vy)


def _edges(image: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Gradient magnitude (Sobel), same shape."""
    gx = ndimage.sobel(image, axis=1)
    gy = ndimage.sobel(image, axis=0)
    return np.asarray(np.hypot(gx, gy), dtype=np.float32)


class MotionDetector:
    """Frame-by-frame motion detection against a selectively updated running background.

    Not thread-safe; one instance per stream. The first frame only initialises the
    background and yields no boxes.
    """

    def __init__(
        self,
        width: int,
        height: int,
        fps: int = 30,
        threshold: float = 25.0,
        alpha: float = 0.05,
        absorb_s: float = 1.0,
    ) -> None:
        """``threshold``: grey levels of difference that count as motion; ``alpha``: the
        background's learning rate where there is none; ``absorb_s``: seconds after which
        a pixel that stayed foreground joins the background."""
        check_positive(width=width, height=height, fps=fps)
        self.shape = (height, width)
        self.threshold = threshold
        self.alpha = alpha
        self.absorb_frames = max(1, round(absorb_s * fps))
        self.min_area = max(4, round((0.03 * min(width, height)) ** 2))
        self._background: npt.NDArray[np.float32] | None = None
        self._age = np.zeros(self.shape, dtype=np.int32)
        self._open = np.ones((3, 3), dtype=bool)
        self._close = np.ones((5, 5), dtype=bool)

    @staticmethod
    def _ghosts(
        frame: npt.NDArray[np.float32],
        background: npt.NDArray[np.float32],
        moving: npt.NDArray[np.bool_],
        labels: npt.NDArray[np.int32],
        count: int,
    ) -> npt.NDArray[np.bool_]:
        """Per label (index 0 unused): is the region a ghost rather than an object?

        A real object's outline is an edge in the current frame; a ghost's outline (the
        place an object has left) is an edge in the background instead.
        """
        outline = labels * (moving & ~ndimage.binary_erosion(moving))
        index = np.arange(1, count + 1)
        here = ndimage.mean(_edges(frame), labels=outline, index=index)
        before = ndimage.mean(_edges(background), labels=outline, index=index)
        ghosts = np.zeros(count + 1, dtype=bool)
        ghosts[1:] = np.asarray(here) < GHOST_EDGE_RATIO * np.asarray(before)
        return ghosts

    def process(self, pixels: Gray) -> list[Box]:
        """Boxes of the moving regions in ``pixels`` (``uint8``, ``(height, width)``).

        Updates the background. Raises ``ValueError`` for a frame of the wrong shape.
        """
        if pixels.shape != self.shape:
            raise ValueError(f"expected a frame of shape {self.shape}, got {pixels.shape}")
        frame = pixels.astype(np.float32)
        if self._background is None:
            self._background = frame
            return []
        background = self._background
        moving = np.abs(frame - background) > self.threshold
        moving = ndimage.binary_opening(moving, structure=self._open)
        moving = ndimage.binary_closing(moving, structure=self._close)
        moving = ndimage.binary_fill_holes(moving)
        labels, count = ndimage.label(moving)
        boxes: list[Box] = []
        if count:
            ghosts = self._ghosts(frame, background, moving, labels, count)
            areas = np.bincount(labels.ravel(), minlength=count + 1)
            for k, found in enumerate(ndimage.find_objects(labels), start=1):
                if found is None:
                    continue
                if ghosts[k]:
                    # what moved away is background now: learn it at once, report nothing
                    region = labels[found] == k
                    background[found][region] = frame[found][region]
                    moving[found][region] = False
                elif areas[k] >= self.min_area:
                    ys, xs = found
                    boxes.append((int(xs.start), int(ys.start), int(xs.stop), int(ys.stop)))

        self._age = np.where(moving, self._age + 1, 0).astype(np.int32)
        absorb = self._age >= self.absorb_frames
        still = ~moving
        background[still] += self.alpha * (frame[still] - background[still])
        background[absorb] = frame[absorb]
        self._age[absorb] = 0
        return boxes


def _intersection(a: Box, b: Box) -> int:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(w, 0) * max(h, 0)


def _area(a: Box) -> int:
    return (a[2] - a[0]) * (a[3] - a[1])


def _draw(pixels: Gray, boxes: list[Box]) -> npt.NDArray[np.uint8]:
    """Palette indices: the frame in 64 greys, box outlines in the box colour."""
    out = (pixels >> 2).astype(np.uint8)
    height, width = pixels.shape
    t = max(1, min(width, height) // 120)  # line thickness
    for x0, y0, x1, y1 in boxes:
        out[y0 : min(y0 + t, y1), x0:x1] = _BOX_INDEX
        out[max(y1 - t, y0) : y1, x0:x1] = _BOX_INDEX
        out[y0:y1, x0 : min(x0 + t, x1)] = _BOX_INDEX
        out[y0:y1, max(x1 - t, x0) : x1] = _BOX_INDEX
    return out


def annotated(pixels: Gray, boxes: list[Box]) -> Image.Image:
    """The frame with its boxes drawn: a palette image of 64 greys and the box colour."""
    return _to_image(_draw(pixels, boxes))


def _palette() -> list[int]:
    greys = [c for g in range(_GREYS) for c in (g * 4 + 2,) * 3]
    return greys + list(_BOX_RGB)


def _to_image(indices: npt.NDArray[np.uint8]) -> Image.Image:
    image = Image.fromarray(indices)  # mode "L"; a palette turns it into "P"
    image.putpalette(_palette())
    return image


def _write_gif(path_str: str, drawn: list[npt.NDArray[np.uint8]], duration_ms: int) -> int:
    images = [_to_image(d) for d in drawn]
    images[0].save(
        path_str,
        save_all=True,
        append_images=images[1:],
        duration=duration_ms,
        loop=0,
        optimize=False,
    )
    return len(images)


class MotionRecorder:
    """The output side of motion detection: scores each frame's boxes against the truth,
    keeps the frames to draw, and writes the files at the end.

    Frames are added in order with :meth:`add`; :meth:`finish` writes ``motion.gif``,
    ``strip.png``, ``detections.csv`` and ``report.json`` under ``out_dir`` (created;
    files are overwritten) and returns the summary (see :func:`detect_motion`). Used by
    :func:`detect_motion` and by the encode stage of the video pipeline
    (:mod:`accelnet.workloads.video_pipeline`). Not thread-safe.
    """

    def __init__(self, out_dir: str, frames: int, width: int, height: int, fps: int) -> None:
        check_stream(frames, width, height, fps)
        self.out = prepare_out_dir(out_dir)
        self.frames, self.width, self.height, self.fps = frames, width, height, fps
        gif_fit = max(1, int(GIF_BUDGET_BYTES / (GIF_BYTES_PER_PIXEL * width * height)))
        self.gif_step = max(1, -(-frames // min(gif_fit, GIF_MAX_FRAMES)))
        last = frames - 1
        self.strip_at = {round(i * last / max(STRIP_FRAMES - 1, 1)) for i in range(STRIP_FRAMES)}
        self.rows: list[tuple[int, Box]] = []
        self.drawn_gif: list[npt.NDArray[np.uint8]] = []
        self.drawn_strip: list[npt.NDArray[np.uint8]] = []
        self.truths = self.detections = self.covered = self.true_hits = self.frames_with = 0

    def add(self, index: int, pixels: Gray, truth: tuple[Box, ...], boxes: list[Box]) -> None:
        """Frame ``index`` (from 0, in order) with its true and detected boxes."""
        self.rows.extend((index, b) for b in boxes)
        self.frames_with += bool(boxes)
        if index > 0:  # the first frame only initialises the background
            self.truths += len(truth)
            self.covered += sum(
                any(_intersection(t, b) * 2 >= _area(t) for b in boxes) for t in truth
            )
            self.detections += len(boxes)
            self.true_hits += sum(any(_intersection(t, b) > 0 for t in truth) for b in boxes)
        if index % self.gif_step == 0 or index in self.strip_at:
            drawn = _draw(pixels, boxes)
            if index % self.gif_step == 0:
                self.drawn_gif.append(drawn)
            if index in self.strip_at:
                self.drawn_strip.append(drawn)

    def finish(self, extra: Summary) -> Summary:
        """Write the files; the summary (``extra`` merged in), also as ``report.json``."""
        out, width, height = self.out, self.width, self.height
        gif_path = out / "motion.gif"
        gif_step, drawn_gif = self.gif_step, self.drawn_gif
        duration = round(1000 * gif_step / self.fps)
        gif_frames = _write_gif(str(gif_path), drawn_gif, duration)
        while gif_path.stat().st_size > GIF_BUDGET_BYTES and len(drawn_gif) > 1:
            gif_step *= 2
            drawn_gif = drawn_gif[::2]
            duration *= 2
            gif_frames = _write_gif(str(gif_path), drawn_gif, duration)

        gutter = np.full((height, max(2, width // 80)), _GREYS - 1, dtype=np.uint8)
        parts = [p for d in self.drawn_strip for p in (d, gutter)][:-1]
        _to_image(np.concatenate(parts, axis=1)).convert("RGB").save(out / "strip.png")

        with (out / "detections.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["frame", "x0", "y0", "x1", "y1"])
            writer.writerows([index, *box] for index, box in self.rows)

        summary: Summary = {
            "frames": self.frames,
            "width": width,
            "height": height,
            "fps": self.fps,
            "detections": len(self.rows),
            "frames_with_detections": self.frames_with,
            "recall": self.covered / self.truths if self.truths else 1.0,
            "precision": self.true_hits / self.detections if self.detections else 1.0,
            "gif_frames": gif_frames,
            "gif_step": gif_step,
            "gif_bytes": gif_path.stat().st_size,
            "files": {
                "gif": "motion.gif",
                "strip": "strip.png",
                "detections": "detections.csv",
                "report": "report.json",
            },
            **extra,
        }
        write_json(out / "report.json", summary)
        return summary


def detect_motion(
    out_dir: str,
    frames: int = 240,
    width: int = 320,
    height: int = 240,
    fps: int = 30,
    seed: int = 0,
    device: str = "cpu",
) -> Summary:
    """Detect motion in a ``frames``-long synthetic stream, frame by frame, and time it.

    Each frame is generated, then handed to a :class:`MotionDetector`; only the detector's
    work is timed (``time.perf_counter``), as the latency a live camera feed would see.
    Frames are processed as fast as they come: nothing waits for real time.

    Writes under ``out_dir`` (created if missing; files are overwritten):

    - ``motion.gif``: the stream with detection boxes drawn, every ``gif_step``-th frame
      (chosen so the file stays under ~2 MB), played at real speed;
    - ``strip.png``: eight evenly spaced annotated frames side by side;
    - ``detections.csv``: ``frame, x0, y0, x1, y1`` per detection box (x1, y1 exclusive);
    - ``report.json``: the returned summary.

    Returns a JSON-serialisable summary: ``detections``, ``frames_with_detections``,
    ``recall`` (true objects at least half covered by a detection box), ``precision``
    (detection boxes overlapping a true object), both over frames after the first,
    ``latency_ms`` (``p50``, ``p99``, ``mean``, ``max`` per frame), ``processed_fps``,
    ``realtime`` (p99 latency within one frame period), ``gif_frames``, ``gif_step``,
    sizes, ``device`` and ``files``. The work runs on the CPU whatever ``device`` says;
    it is recorded, not interpreted. Deterministic apart from the timings. Raises
    ``ValueError`` for non-positive counts or sizes below 8 pixels.
    """
    check_stream(frames, width, height, fps)
    recorder = MotionRecorder(out_dir, frames, width, height, fps)
    detector = MotionDetector(width, height, fps)
    latencies_ms: list[float] = []
    for frame in synthetic_stream(frames, width, height, fps, seed):
        t0 = time.perf_counter()
        boxes = detector.process(frame.pixels)
        latencies_ms.append((time.perf_counter() - t0) * 1000.0)
        recorder.add(frame.index, frame.pixels, frame.truth, boxes)

    lat = np.asarray(latencies_ms)
    total_s = float(lat.sum()) / 1000.0
    p99 = float(np.percentile(lat, 99))
    return recorder.finish(
        {
            "workload": "detect_motion",
            "device": device,
            "seed": seed,
            "latency_ms": {
                "p50": float(np.percentile(lat, 50)),
                "p99": p99,
                "mean": float(lat.mean()),
                "max": float(lat.max()),
            },
            "processed_fps": frames / max(total_s, 1e-9),
            "realtime": p99 <= 1000.0 / fps,
        }
    )
