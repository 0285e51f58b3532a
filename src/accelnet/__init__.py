"""accelnet: run work on a network of heterogeneous accelerators.

    import accelnet
    with accelnet.local() as cluster:            # this machine (or local(fabric="mixed-lab"))
        job = cluster.submit(fn, 1, 2, accelerators="any:1")
        job.result()

Heavy parts are imported only when used.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "local":
        from accelnet.runtime.sdk import local  # noqa: PLC0415 (heavy: only when used)

        return local
    raise AttributeError(f"module 'accelnet' has no attribute {name!r}")
