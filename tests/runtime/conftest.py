"""Fixtures shared by the runtime tests of more than one module."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def ddp_single(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The DDP example's metrics as one plain process (``test_train_example.run_single``):
    a pure function of its seed and step count, so one run serves every test that compares
    a gang's weights with it (the local and the Ray backend's)."""
    pytest.importorskip("torch")
    from tests.runtime.test_train_example import run_single

    return run_single(tmp_path_factory.mktemp("ddp-single"))
