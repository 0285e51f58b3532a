"""Files the service keeps to itself: made readable and writable by their owner only."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

_SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's, beside a database


def private_db(path: Path) -> None:
    """Create the SQLite file at ``path`` if missing, mode 0600, and take group and other
    access off it and its side files (SQLite makes those with the database's mode): no
    task, whatever user it runs as, reads the jobs or the tokens. Raises ``OSError`` if the
    file cannot be made."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.close(fd)
    for p in (path, *(path.with_name(path.name + s) for s in _SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            if p.stat().st_mode & 0o077:
                p.chmod(0o600)
