"""accelnet: run work on a network of heterogeneous accelerators.

    import accelnet
    with accelnet.local() as cluster:            # this machine (or local(fabric="mixed-lab"))
        job = cluster.submit(fn, 1, 2, accelerators="any:1")
        job.result()

    api = accelnet.Client("http://127.0.0.1:8765", token)   # a server (accelnet serve)
    job = api.submit({"name": "hello", "run": "echo hi"})

Heavy parts are imported only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports it when first used
    from accelnet.client import Client as Client


def __getattr__(name: str) -> Any:
    if name == "local":
        from accelnet.runtime.sdk import local  # noqa: PLC0415 (heavy: only when used)

        return local
    if name == "Client":
        from accelnet.client import Client  # noqa: PLC0415 (httpx: only when used)

        return Client
    raise AttributeError(f"module 'accelnet' has no attribute {name!r}")
