"""The web dashboard: static HTML, JavaScript and CSS served next to the API.

:func:`mount_dashboard` adds the pages to the server's application (docs/dashboard.md).
The files need no token; the page asks for one and sends it on every API call.
"""

from __future__ import annotations

from accelnet.api.dashboard.mount import SECURITY_HEADERS, mount_dashboard, static_file

__all__ = ["SECURITY_HEADERS", "mount_dashboard", "static_file"]
