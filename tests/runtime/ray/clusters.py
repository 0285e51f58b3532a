"""A Ray cluster on 127.0.0.1 for a test module, this process connected to it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from accelnet.runtime.ray.local_cluster import start_cluster


def connected_cluster(nodes: Mapping[str, str], **options: Any) -> Iterator[Any]:
    """:func:`start_cluster` (``options`` as it takes them), ``ray.init`` to it, yielded;
    then disconnected and shut down: a fixture's body."""
    import ray

    c = start_cluster(nodes, **options)
    try:
        ray.init(address=c.address, log_to_driver=False, logging_level="warning")
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
