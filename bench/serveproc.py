"""``accelnet serve`` as a child process for the API benches, in the default isolation.

As root, ``serve`` runs each tenant's tasks as a user of its own (the default users get);
without root it refuses to start unless told the tasks are trusted, so there (and only
there) :class:`ServeProcess` passes ``--trusted-tasks``. The mode in force is in
:attr:`ServeProcess.isolation` for the bench's JSON.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil


def accelnet_cmd() -> list[str]:
    """The installed console script (or the module, without one)."""
    script = Path(sys.executable).parent / "accelnet"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from accelnet.cli.main import main; main()"]


class ServeProcess:
    """``accelnet serve --port 0 --db DB *args`` on 127.0.0.1, started and up (its URL
    read from its first line); :meth:`stop` ends it with SIGTERM. RuntimeError, with its
    stderr, if it does not start."""

    def __init__(self, tmp: Path, db: Path, *args: str) -> None:
        self.err = tmp / "serve.err"
        trusted = [] if os.geteuid() == 0 else ["--trusted-tasks"]
        self.isolation = "per-tenant users" if not trusted else "trusted tasks (not root)"
        cmd = [*accelnet_cmd(), "serve", "--port", "0", "--db", str(db), "--log-level",
               "warning", *trusted, *args]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err.open("w"),
                                     text=True)  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"serving on (\S+)", line)
        if not found:
            self.proc.kill()
            raise RuntimeError(f"accelnet serve did not start: {line!r} "
                               f"{self.err.read_text()[-2000:]}")  # fmt: skip
        self.url = found.group(1)
        self.ps = psutil.Process(self.proc.pid)

    def cpu_s(self, children: bool = False) -> float:
        """CPU seconds of the server process so far (``children``: and of its workers)."""
        total = 0.0
        for p in [self.ps, *(self.ps.children(recursive=True) if children else [])]:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        return total

    def stop(self) -> int:
        """SIGTERM; its exit code (-9 if it had to be killed after 60 s)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9
