"""Suite-wide settings: property tests judged on what they find, never on how fast.

Hypothesis's per-example ``deadline`` and its ``too_slow`` / ``data_too_large`` health checks
measure wall time, which on a loaded 2-core machine says more about the neighbours than about
the code; a test that passes idle and fails loaded is a broken test. The profile is loaded
here, before any test module is imported, so every ``@settings(...)`` in the suite inherits
it and only overrides what it names (``max_examples`` mostly).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "accelnet",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("accelnet")


def pytest_sessionfinish() -> None:
    """Remove the folders the spawned servers of this session kept their state in."""
    import shutil

    from tests.api.conftest import SERVED

    for folder in SERVED:
        shutil.rmtree(folder, ignore_errors=True)
