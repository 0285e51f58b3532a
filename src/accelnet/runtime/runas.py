"""Running a tenant's tasks as an unprivileged user of this machine.

A service started as root (``accelnet serve --run-as TENANT=USER``) runs each task of a
mapped tenant as that user: a command's shell is started with the user's uid and gid and no
supplementary groups, a Python entry point runs in a child of the device's worker that has
dropped to the user; either way with umask 077, in the job's scratch folder, with ``HOME``,
``USER`` and ``LOGNAME`` set for the user. ``*=USER`` maps every tenant without a mapping of
its own. The folders such a task writes (its scratch folder, its job's output folder) are
handed to the user (mode 0700); their parents are made traversable but not listable (0711),
so one user cannot list or enter another's folders, and the service's own files (its
database, tokens, logs) stay the service user's.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ANY_TENANT = "*"


class RunAsError(ValueError):
    """A ``--run-as`` mapping that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class OsUser:
    """A user of this machine: name, uid, primary gid and home folder."""

    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> OsUser:
        """The user called ``name`` (or with that numeric uid); KeyError if none."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            if not name.isdigit():
                raise
            entry = pwd.getpwuid(int(name))
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)

    def to_wire(self) -> tuple[str, int, int, str]:
        """What a worker request carries."""
        return (self.name, self.uid, self.gid, self.home)


def parse_run_as(items: Iterable[str], euid: int | None = None) -> dict[str, OsUser]:
    """``TENANT=USER`` items (``*`` for any tenant) as a map; :class:`RunAsError` naming the
    item for a malformed one, an unknown user, a tenant given twice, or a service that is not
    root (``euid``, default this process's: only root can start tasks as another user)."""
    mapping: dict[str, OsUser] = {}
    for item in items:
        tenant, sep, user = item.partition("=")
        tenant, user = tenant.strip(), user.strip()
        if not sep or not tenant or not user:
            raise RunAsError(f"--run-as {item!r}: expected TENANT=USER (or *=USER)")
        if tenant in mapping:
            raise RunAsError(f"--run-as {item!r}: tenant {tenant!r} is mapped twice")
        try:
            mapping[tenant] = OsUser.named(user)
        except (KeyError, ValueError):
            raise RunAsError(f"--run-as {item!r}: no user {user!r} on this machine") from None
    uid = os.geteuid() if euid is None else euid
    if mapping and uid != 0:
        raise RunAsError(
            f"--run-as needs the service to run as root (it runs as uid {uid}): only root "
            "can start tasks as another user"
        )
    return mapping


def user_for(run_as: Mapping[str, OsUser], tenant: str) -> OsUser | None:
    """The user ``tenant``'s tasks run as (None: the service's own user)."""
    return run_as.get(tenant, run_as.get(ANY_TENANT))


def hand_over(path: Path, user: OsUser, root: Path) -> None:
    """Make ``path`` (a folder under ``root``) the user's, mode 0700, and the folders from
    ``root`` down to it passable but neither listable nor writable by others (``0711``).
    Raises ``OSError``."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(path, user.uid, user.gid)
    path.chmod(0o700)
    for parent in path.parents:
        mode = parent.stat().st_mode & 0o777
        if mode != (mode & 0o700) | 0o011:
            parent.chmod((mode & 0o700) | 0o011)  # made by mkdir -p (0755), or the service's
        if parent == root:
            break


def untraversable(folder: Path) -> Path | None:
    """The first of ``folder`` and its parents that other users cannot pass (no ``o+x``),
    or None: a task run as another user reaches its folders under ``folder``."""
    for path in (folder, *folder.parents):
        if path.exists() and not path.stat().st_mode & 0o001:
            return path
    return None


def task_identity(user: OsUser, cwd: str) -> dict[str, str]:
    """The environment variables that name the user a task runs as."""
    home = user.home if os.path.isdir(user.home) else cwd
    return {"HOME": home, "USER": user.name, "LOGNAME": user.name}
