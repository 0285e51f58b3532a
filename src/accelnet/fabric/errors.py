"""Errors in fabric files: file, line, key path and value (see :mod:`accelnet.specio`)."""

from __future__ import annotations

from accelnet.specio import SpecError, SpecIssue, format_path, short_repr


class FabricSpecError(SpecError):
    """A fabric file (or preset) that is not valid; ``issues`` lists every problem found."""

    what = "fabric spec"


__all__ = ["FabricSpecError", "SpecIssue", "format_path", "short_repr"]
