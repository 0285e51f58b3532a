"""The Python client of an accelnet server (``accelnet serve``, docs/api.md, docs/client.md).

    import accelnet
    with accelnet.Client("http://127.0.0.1:8765", token) as api:
        job = api.submit({"name": "hello", "run": "echo hi"})
        print(api.wait(job).state, api.logs(job))

It needs httpx and pydantic only; the server's and the scheduler's packages are not
imported (a job file given to ``submit`` is validated with the scheduler's models, which
are imported then).
"""

from __future__ import annotations

from accelnet.client.client import Client
from accelnet.client.config import ClientConfig, ConfigError, config_path, resolve
from accelnet.client.errors import ApiError
from accelnet.client.jobspecs import JobLike
from accelnet.client.models import (
    Answer,
    AuditEntry,
    AuditPage,
    DeviceOpOut,
    DeviceOut,
    EventOut,
    EventsPage,
    Health,
    JobOut,
    JobsPage,
    LogChunk,
    PolicyOut,
    ServiceOut,
    TenantOut,
    WhoAmI,
)
from accelnet.client.streams import Stream

__all__ = [
    "Answer",
    "ApiError",
    "AuditEntry",
    "AuditPage",
    "Client",
    "ClientConfig",
    "ConfigError",
    "DeviceOpOut",
    "DeviceOut",
    "EventOut",
    "EventsPage",
    "Health",
    "JobLike",
    "JobOut",
    "JobsPage",
    "LogChunk",
    "PolicyOut",
    "ServiceOut",
    "Stream",
    "TenantOut",
    "WhoAmI",
    "config_path",
    "resolve",
]
