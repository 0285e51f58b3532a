"""Loading a benchmark script of ``bench/`` as a module, for tests that run it reduced."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (registered in ``sys.modules``: dataclasses look
    their module up), with ``bench/`` importable for its siblings (``benchutil``...)."""
    if str(BENCH_DIR) not in sys.path:
        sys.path.append(str(BENCH_DIR))
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
