"""What a tenant reads of the server's texts: no path of the server's file system.

A failed rank's error names its log file, ``(log: /srv/accelnet/work/logs/job-1.2.0.err)``,
which is right for ``accelnet run`` on one's own machine and wrong over the API: the path
tells a tenant how the server is laid out, and it cannot open it anyway. The API says
which log it is instead, as its logs endpoint names them:
``(log: attempt 2, rank 0, stderr)`` (a setup task's: ``(log: attempt 2, setup on node 0,
stderr)``). A job's inputs event says where its inputs' outputs are:
``x = outputs of job-1 at /srv/.../outputs/job-1 (by reference)`` becomes ``x = outputs of
job-1 (by reference)``.
"""

from __future__ import annotations

import re

# the path up to the log's own name (the last "/" before it), any characters but a newline
_LOG = re.compile(r"\(log: (?:[^\n]*?/)?[^/\n]+?\.(\d+)\.(\d+|setup-\d+)\.(out|err)\)")
_INPUTS = re.compile(r" at [^;\n]*? \(by reference\)")


def _log_name(m: re.Match[str]) -> str:
    attempt, rank, stream = m[1], m[2], m[3]
    where = f"setup on node {rank[6:]}" if rank.startswith("setup-") else f"rank {rank}"
    return f"(log: attempt {attempt}, {where}, std{stream})"


def public_text(text: str | None) -> str | None:
    """``text`` with every log path replaced by the log's attempt, rank (or setup node)
    and stream, and every inputs' location dropped."""
    if not text:
        return text
    if "(log: " in text:
        text = _LOG.sub(_log_name, text)
    if "(by reference)" in text:
        text = _INPUTS.sub(" (by reference)", text)
    return text
