"""Rendering: a numpy ray tracer of one fixed scene, split into horizontal bands.

The scene is four spheres (one nearly a mirror) on a checkered plane under a sky, lit by
one point light: Lambert diffuse, Blinn-Phong highlights, hard shadows, one bounce of
reflection and 2x2 supersampling. ``render_tile`` renders band ``rank`` of ``world`` and
``assemble`` stitches the bands into ``render.png``.

Every pixel is a function of its global coordinates only, computed with elementwise
arithmetic that IEEE 754 rounds exactly (``+ - * /``, ``sqrt``, ``floor``; no ``exp``,
``pow`` or BLAS reductions, whose vectorised kernels may round differently for different
array lengths). So the assembled image is bit-for-bit the same whatever ``world`` is.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image

from accelnet.workloads._common import (
    Summary,
    band,
    check_positive,
    check_rank,
    prepare_out_dir,
)

Array = npt.NDArray[np.float64]

# ----- the scene ----------------------------------------------------------------------
EYE = (0.0, 1.5, -3.2)
TARGET = (0.0, 0.65, 3.0)
FOV_DEG = 55.0
LIGHT = (-5.0, 5.0, -0.5)
AMBIENT = 0.06
SHININESS_SQUARINGS = 5  # highlight exponent 2**5 = 32, by repeated squaring
EPS = 1e-4
MAX_DEPTH = 1  # bounces of reflection after the primary ray
SUBSAMPLES = (0.25, 0.75)  # 2x2 supersampling offsets inside a pixel
SKY_HORIZON = (0.85, 0.9, 1.0)
SKY_ZENITH = (0.3, 0.5, 0.9)
FOG = 0.004  # fades the far checkerboard into the horizon: weight 1 / (1 + FOG * t**2)

# (center, radius, colour, reflectivity)
SPHERES: tuple[tuple[tuple[float, float, float], float, tuple[float, float, float], float], ...] = (
    ((0.0, 1.0, 3.0), 1.0, (0.9, 0.2, 0.2), 0.15),
    ((-2.2, 0.7, 4.0), 0.7, (0.2, 0.8, 0.3), 0.1),
    ((2.0, 0.6, 2.4), 0.6, (0.25, 0.45, 0.95), 0.25),
    ((0.9, 0.35, 1.2), 0.35, (0.92, 0.92, 0.92), 0.75),
)
PLANE_COLOURS = ((0.92, 0.92, 0.88), (0.18, 0.18, 0.22))
PLANE_REFLECTIVITY = 0.1

_MISS = -1
_PLANE = 0  # sphere k is object k + 1


def _dot(a: Array, b: Array) -> Array:
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def _normalize(v: Array) -> Array:
    return v / np.sqrt(_dot(v, v))[..., None]


def _vec(t: tuple[float, float, float]) -> Array:
    return np.array(t, dtype=np.float64)


def _intersect(origin: Array, direction: Array) -> tuple[Array, npt.NDArray[np.int64]]:
    """Nearest hit distance and object id per ray (``inf`` and ``_MISS`` for a miss)."""
    n = len(origin)
    best = np.full(n, np.inf)
    obj = np.full(n, _MISS, dtype=np.int64)
    dy = direction[:, 1]
    down = dy < -1e-12
    t_plane = np.full(n, np.inf)
    t_plane[down] = -origin[down, 1] / dy[down]
    hit = (t_plane > EPS) & (t_plane < best)
    best[hit] = t_plane[hit]
    obj[hit] = _PLANE
    for k, (center, radius, _, _) in enumerate(SPHERES):
        oc = origin - _vec(center)
        b = _dot(oc, direction)
        disc = b * b - (_dot(oc, oc) - radius * radius)
        root = np.sqrt(np.maximum(disc, 0.0))
        near = -b - root
        t = np.where(near > EPS, near, -b + root)
        hit = (disc >= 0.0) & (t > EPS) & (t < best)
        best[hit] = t[hit]
        obj[hit] = k + 1
    return best, obj


def _sky(direction: Array) -> Array:
    w = np.clip(direction[:, 1], 0.0, 1.0)[:, None]
    return (1.0 - w) * _vec(SKY_HORIZON) + w * _vec(SKY_ZENITH)


def _shade(origin: Array, direction: Array, depth: int) -> Array:
    """Linear RGB seen along each ray (rows of ``origin``/``direction``)."""
    t, obj = _intersect(origin, direction)
    colour = _sky(direction)
    hit = obj != _MISS
    if not hit.any():
        return colour
    o, d, th, oh = origin[hit], direction[hit], t[hit], obj[hit]
    point = o + d * th[:, None]
    normal = np.zeros_like(point)
    base = np.zeros_like(point)
    refl = np.zeros(len(point))
    on_plane = oh == _PLANE
    normal[on_plane] = (0.0, 1.0, 0.0)
    parity = (np.floor(point[:, 0]) + np.floor(point[:, 2])) % 2.0
    base[on_plane & (parity == 0.0)] = PLANE_COLOURS[0]
    base[on_plane & (parity != 0.0)] = PLANE_COLOURS[1]
    refl[on_plane] = PLANE_REFLECTIVITY
    for k, (center, radius, rgb, reflectivity) in enumerate(SPHERES):
        mine = oh == k + 1
        normal[mine] = (point[mine] - _vec(center)) / radius
        base[mine] = rgb
        refl[mine] = reflectivity

    to_light = _vec(LIGHT) - point
    dist = np.sqrt(_dot(to_light, to_light))
    light_dir = to_light / dist[:, None]
    lift = point + normal * EPS
    t_shadow, _ = _intersect(lift, light_dir)
    lit = (t_shadow >= dist).astype(np.float64)
    diffuse = np.maximum(_dot(normal, light_dir), 0.0) * lit
    spec = np.maximum(_dot(normal, _normalize(light_dir - d)), 0.0)
    for _ in range(SHININESS_SQUARINGS):
        spec = spec * spec
    spec = spec * lit
    local = base * (AMBIENT + (1.0 - AMBIENT) * diffuse)[:, None] + 0.6 * spec[:, None]

    if depth < MAX_DEPTH:
        bounce = refl > 0.0
        if bounce.any():
            db, nb = d[bounce], normal[bounce]
            reflected = db - 2.0 * _dot(db, nb)[:, None] * nb
            seen = _shade(lift[bounce], reflected, depth + 1)
            rb = refl[bounce][:, None]
            local[bounce] = (1.0 - rb) * local[bounce] + rb * seen

    fog = (1.0 / (1.0 + FOG * th * th))[:, None]
    colour[hit] = fog * local + (1.0 - fog) * colour[hit]
    return colour


def _camera_rays(rows: range, width: int, height: int) -> Array:
    """Unit directions, shape ``(len(rows), width, 4, 3)``: 4 subsamples per pixel."""
    eye, target, up = _vec(EYE), _vec(TARGET), _vec((0.0, 1.0, 0.0))
    forward = _normalize(target - eye)
    right = _normalize(np.cross(up, forward))
    true_up = np.cross(forward, right)
    half = math.tan(math.radians(FOV_DEG) / 2.0)
    aspect = width / height
    sub = [(sy, sx) for sy in SUBSAMPLES for sx in SUBSAMPLES]
    i = np.arange(rows.start, rows.stop, dtype=np.float64)[:, None, None]
    j = np.arange(width, dtype=np.float64)[None, :, None]
    sy = np.array([s[0] for s in sub])[None, None, :]
    sx = np.array([s[1] for s in sub])[None, None, :]
    u = (2.0 * (j + sx) / width - 1.0) * (aspect * half)
    v = (1.0 - 2.0 * (i + sy) / height) * half
    u, v = np.broadcast_arrays(u, v)
    dirs = forward + u[..., None] * right + v[..., None] * true_up
    return _normalize(dirs)


def _render_rows(start: int, stop: int, width: int, height: int) -> npt.NDArray[np.uint8]:
    dirs = _camera_rays(range(start, stop), width, height)
    flat = dirs.reshape(-1, 3)
    origin = np.broadcast_to(_vec(EYE), flat.shape).copy()
    rgb = _shade(origin, flat, 0).reshape(dirs.shape)
    # average the 4 subsamples in a fixed order, then gamma 2 (sqrt) and quantise
    mean = (rgb[:, :, 0] + rgb[:, :, 1] + rgb[:, :, 2] + rgb[:, :, 3]) / 4.0
    srgb = np.sqrt(np.clip(mean, 0.0, 1.0))
    return np.round(srgb * 255.0).astype(np.uint8)


def tile_name(rank: int) -> str:
    """The file ``render_tile`` writes for ``rank``."""
    return f"tile_{rank}.npy"


def render_tile(
    out_dir: str,
    rank: int,
    world: int,
    width: int = 320,
    height: int = 240,
    device: str = "cpu",
) -> Summary:
    """Render horizontal band ``rank`` of ``world`` and save it as ``tile_{rank}.npy``.

    Band ``rank`` is image rows ``[rank * height // world, (rank + 1) * height // world)``;
    the tile is a ``uint8`` array of shape ``(rows, width, 3)`` (sRGB-ish, gamma 2). The
    pixels depend only on their position in the whole image, so any split assembles to
    the same image. Deterministic; idempotent (overwrites the tile). ``out_dir`` is
    created if missing.

    Returns a JSON-serialisable summary: ``rank``, ``world``, ``rows`` ([start, stop)),
    ``width``, ``height``, ``rays`` (primary rays traced), ``seconds``, ``device`` and
    ``files`` (``{"tile": "tile_{rank}.npy"}``). The work runs on the CPU whatever
    ``device`` says; it is recorded, not interpreted. Raises ``ValueError`` for a
    ``rank`` outside ``[0, world)``, a size below 1, or more bands than rows.
    """
    check_rank(rank, world)
    check_positive(width=width, height=height)
    if world > height:
        raise ValueError(f"world ({world}) must not exceed height ({height}): a band per row")
    out = prepare_out_dir(out_dir)
    start, stop = band(rank, world, height)
    began = time.perf_counter()
    tile = _render_rows(start, stop, width, height)
    seconds = time.perf_counter() - began
    np.save(out / tile_name(rank), tile, allow_pickle=False)
    return {
        "workload": "render_tile",
        "device": device,
        "rank": rank,
        "world": world,
        "rows": [start, stop],
        "width": width,
        "height": height,
        "rays": (stop - start) * width * len(SUBSAMPLES) ** 2,
        "seconds": round(seconds, 6),
        "files": {"tile": tile_name(rank)},
    }


def assemble(
    out_dir: str, world: int, width: int = 320, height: int = 240, in_dir: str | None = None
) -> Summary:
    """Stitch ``tile_0.npy`` .. ``tile_{world-1}.npy`` in ``in_dir`` (default ``out_dir``)
    into ``out_dir/render.png``; tiles are memory-mapped where they are, not copied.

    Each tile must have the shape ``render_tile`` gives it for the same ``world``,
    ``width`` and ``height``. Idempotent (overwrites ``render.png``). Returns a
    JSON-serialisable summary: ``width``, ``height``, ``world``, ``sha256`` of the pixel
    bytes (equal for any ``world``), ``mean_brightness`` (0..255) and ``files``
    (``{"image": "render.png"}``). Raises ``FileNotFoundError`` naming a missing tile and
    ``ValueError`` for a tile of the wrong shape or dtype, or invalid sizes.
    """
    check_positive(world=world, width=width, height=height)
    out = prepare_out_dir(out_dir)
    source = Path(in_dir) if in_dir is not None else out
    tiles = []
    for rank in range(world):
        path = source / tile_name(rank)
        if not path.exists():
            raise FileNotFoundError(f"missing tile {path} (rank {rank} of {world})")
        tile = np.load(path, mmap_mode="r", allow_pickle=False)
        start, stop = band(rank, world, height)
        want = (stop - start, width, 3)
        if tile.shape != want or tile.dtype != np.uint8:
            raise ValueError(
                f"{path}: expected uint8 {want}, got {tile.dtype} {tile.shape}; "
                "was it rendered with the same world, width and height?"
            )
        tiles.append(tile)
    image = np.concatenate(tiles, axis=0)
    Image.fromarray(image).save(out / "render.png")
    return {
        "workload": "assemble",
        "world": world,
        "width": width,
        "height": height,
        "sha256": hashlib.sha256(image.tobytes()).hexdigest(),
        "mean_brightness": float(image.mean()),
        "files": {"image": "render.png"},
    }
