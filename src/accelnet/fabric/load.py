"""One entry point for every way to name a fabric: preset, generator, file, or this machine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from accelnet.fabric.build import load_fabric_file
from accelnet.fabric.fabric import Fabric
from accelnet.fabric.presets import FAT_TREE_HELP, is_generator, load_preset, preset_names

if TYPE_CHECKING:
    from accelnet.fabric.discovery import CpuMode


class FabricNotFoundError(LookupError):
    """A name that is neither a preset, a generator, nor an existing file."""


def load_fabric(ref: str | None = None, cpu_devices: CpuMode = "per-core") -> Fabric:
    """The fabric ``ref`` names; ``None`` or ``"local"`` discovers this machine.

    Raises FabricSpecError for an invalid file and FabricNotFoundError for an unknown name.
    """
    if ref is None or ref == "local":
        from accelnet.fabric.discovery import discover  # noqa: PLC0415 (reads the machine)

        return discover(cpu_devices).fabric
    if ref in preset_names() or is_generator(ref):
        return load_preset(ref)
    path = Path(ref)
    if path.is_file():
        return load_fabric_file(path)
    raise FabricNotFoundError(
        f"{ref!r} is not a preset, a generator or a file; presets: {', '.join(preset_names())}"
        f"; generator: {FAT_TREE_HELP}; or 'local' for this machine"
    )
