"""Whose process listens on a replica's port: the check that keeps a tenant's traffic from
another tenant's process.

A replica's port is picked free by the service and handed to its job, which binds it when
its server starts; until then any process on the machine could bind it first (another
tenant's job that guesses or scans for it) and answer the readiness check. Before the router
sends a replica any request, the service checks that the listener on that port runs as the
user the replica's tenant runs as (its own OS user when tasks run as tenant users; the
service's user otherwise). :func:`listener_uid` reads the machine's socket table (psutil):
the local backend only (a Ray node's sockets are on its own machine).
"""

from __future__ import annotations

import psutil

_ANY = ("0.0.0.0", "::", "")


def listener_uid(port: int, address: str = "127.0.0.1") -> int | None:
    """The real uid of the process listening on TCP ``address:port``; None if nothing
    listens there or its owner cannot be told (another user's socket, seen without root)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for c in conns:
        if c.status != psutil.CONN_LISTEN or not c.laddr or c.laddr.port != port:
            continue
        if c.laddr.ip != address and c.laddr.ip not in _ANY:
            continue
        if c.pid is None:
            return None
        try:
            return int(psutil.Process(c.pid).uids().real)
        except psutil.Error:
            return None
    return None
