"""``--backend local|ray`` and ``--ray-address`` for the commands that run jobs.

``--ray-address`` takes ``auto`` (the cluster this machine is a node of), ``ray://host:port``
(Ray Client), a cluster's GCS address (``host:6379``), or ``local-cluster``: a cluster of
three emulated nodes started on this machine for the command's duration (docs/ray.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from accelnet.cli.output import fail, note
from accelnet.runtime.ray.connect import RayConnectError, RayOptions, RayUnavailableError
from accelnet.runtime.ray.local_cluster import LOCAL_CLUSTER, local_ray_cluster

BACKENDS = ("local", "ray")
BACKEND_HELP = "where tasks run: local (this machine) or ray (a Ray cluster; docs/ray.md)"
ADDRESS_HELP = (
    "with --backend ray: auto, ray://host:port, host:port, or local-cluster (three "
    "emulated Ray nodes started on this machine)"
)


@contextlib.contextmanager
def ray_backend(backend: str, address: str | None, default: str) -> Iterator[RayOptions | None]:
    """None for the local backend; for ``ray``, the options to connect with (a local
    cluster started first if the address, or else ``default``, is ``local-cluster``).
    Exits with a message for an unknown backend, a missing Ray, or a cluster that fails."""
    if backend not in BACKENDS:
        fail(f"--backend {backend!r}: valid: {', '.join(BACKENDS)}", 2)
    if backend == "local":
        if address is not None:
            fail("--ray-address needs --backend ray", 2)
        yield None
        return
    where = address or default
    try:
        if where == LOCAL_CLUSTER:
            note("starting a local Ray cluster of 3 emulated nodes (seconds)")
            with local_ray_cluster() as started:
                yield RayOptions(address=started)
        else:
            yield RayOptions(address=where)
    except (RayUnavailableError, RayConnectError) as exc:
        fail(exc, 1)
