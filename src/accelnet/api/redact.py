"""What a tenant reads of the server's texts: no path of the server's file system.

A failed rank's error names its log file, ``(log: /srv/accelnet/work/logs/job-1.2.0.err)``,
which is right for ``accelnet run`` on one's own machine and wrong over the API: the path
tells a tenant how the server is laid out, and it cannot open it anyway. The API says
which log it is instead, as its logs endpoint names them:
``(log: attempt 2, rank 0, stderr)``.
"""

from __future__ import annotations

import re

_LOG = re.compile(r"\(log: (?:[^()]*/)?[^/()]+\.(\d+)\.(\d+)\.(out|err)\)")


def public_text(text: str | None) -> str | None:
    """``text`` with every log path replaced by the log's attempt, rank and stream."""
    if not text or "(log: " not in text:
        return text
    return _LOG.sub(lambda m: f"(log: attempt {m[1]}, rank {m[2]}, std{m[3]})", text)
