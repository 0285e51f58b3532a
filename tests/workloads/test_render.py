"""``render_tile`` / ``assemble``: bands of a ray-traced scene stitch into one image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from accelnet.workloads.render import assemble, render_tile

W, H = 48, 40  # 40 rows in 3 bands: 13, 13, 14


def render(out: Path, world: int) -> dict[str, object]:
    for rank in reversed(range(world)):  # any order, as workers finish
        summary = render_tile(str(out), rank, world, W, H, device="cpu")
        assert (out / f"tile_{rank}.npy").exists()
        assert summary["files"] == {"tile": f"tile_{rank}.npy"}
    return assemble(str(out), world, W, H)


def read_png(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        assert image.mode == "RGB"
        return np.asarray(image).astype(np.int64)


def test_the_image_is_the_same_whatever_the_split(tmp_path: Path) -> None:
    whole = render(tmp_path / "w1", 1)
    split = render(tmp_path / "w3", 3)
    ragged = render(tmp_path / "w7", 7)
    pixels = [read_png(tmp_path / d / "render.png") for d in ("w1", "w3", "w7")]
    assert pixels[0].shape == (H, W, 3)
    assert np.array_equal(pixels[0], pixels[1])
    assert np.array_equal(pixels[0], pixels[2])
    assert whole["sha256"] == split["sha256"] == ragged["sha256"]


def test_bands_cover_the_rows_once(tmp_path: Path) -> None:
    bands = [render_tile(str(tmp_path), r, 3, W, H)["rows"] for r in range(3)]
    assert bands == [[0, 13], [13, 26], [26, 40]]
    assert [np.load(tmp_path / f"tile_{r}.npy").shape for r in range(3)] == [
        (13, W, 3),
        (13, W, 3),
        (14, W, 3),
    ]


def test_the_scene_is_rendered(tmp_path: Path) -> None:
    render(tmp_path, 2)
    image = read_png(tmp_path / "render.png")
    sky, floor = image[0], image[-1]
    assert (sky[:, 2] > sky[:, 0]).all()  # a blue sky above
    assert floor.std() > 20  # a checkerboard below
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    assert ((r > g + 40) & (r > b + 40)).mean() > 0.02  # the red sphere
    assert ((g > r + 40) & (g > b + 20)).mean() > 0.005  # the green one
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 100  # shading, not flat fills


def test_assemble_names_a_missing_or_mismatched_tile(tmp_path: Path) -> None:
    render_tile(str(tmp_path), 0, 2, W, H)
    with pytest.raises(FileNotFoundError, match="tile_1"):
        assemble(str(tmp_path), 2, W, H)
    render_tile(str(tmp_path), 1, 3, W, H)  # a band of another split
    with pytest.raises(ValueError, match="tile_1"):
        assemble(str(tmp_path), 2, W, H)


@pytest.mark.parametrize(("rank", "world"), [(-1, 2), (2, 2), (0, 0), (0, H + 1)])
def test_render_tile_rejects_bad_ranks(tmp_path: Path, rank: int, world: int) -> None:
    with pytest.raises(ValueError):
        render_tile(str(tmp_path), rank, world, W, H)
