"""Calling a job's ``entrypoint`` (``package.module:function``) inside a worker."""

from __future__ import annotations

import importlib
from typing import Any


def call_entrypoint(function: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Import ``module`` and call ``function(*args, **kwargs)``; its return value is the
    task's result. ImportError / AttributeError name what was not found."""
    module, _, name = function.partition(":")
    target = getattr(importlib.import_module(module), name)
    return target(*args, **kwargs)
