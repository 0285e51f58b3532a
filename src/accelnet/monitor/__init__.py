"""Monitoring: Prometheus metrics over the live cluster (``/metrics``).

The pure parts (the :class:`MetricsSource` protocol and its records, :class:`DecisionTimer`)
import nothing heavy, so the runtime can use them; the exporter (:func:`render`,
:func:`make_registry`, :func:`exposition`, :data:`CONTENT_TYPE`, :class:`AccelnetCollector`)
loads ``prometheus_client`` on first use. See docs/metrics.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from accelnet.monitor.source import (
    DeviceInfo,
    JobInfo,
    LinkUse,
    MetricsSource,
    Snapshot,
    device_info,
    job_info,
    link_uses,
    link_uses_from,
)
from accelnet.monitor.timing import (
    DECISION_BUCKETS,
    QUEUE_WAIT_BUCKETS,
    DecisionTimer,
    HistogramSnapshot,
    TenantHistograms,
    histogram,
)

if TYPE_CHECKING:
    from accelnet.monitor.metrics import (
        CONTENT_TYPE,
        AccelnetCollector,
        exposition,
        make_registry,
        render,
    )

_LAZY = frozenset({"CONTENT_TYPE", "AccelnetCollector", "exposition", "make_registry", "render"})

__all__ = [
    "CONTENT_TYPE",
    "DECISION_BUCKETS",
    "QUEUE_WAIT_BUCKETS",
    "AccelnetCollector",
    "DecisionTimer",
    "DeviceInfo",
    "HistogramSnapshot",
    "JobInfo",
    "LinkUse",
    "MetricsSource",
    "Snapshot",
    "TenantHistograms",
    "device_info",
    "exposition",
    "histogram",
    "job_info",
    "link_uses",
    "link_uses_from",
    "make_registry",
    "render",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("accelnet.monitor.metrics"), name)
    raise AttributeError(f"module 'accelnet.monitor' has no attribute {name!r}")
