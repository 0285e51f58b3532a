"""Running a tenant's tasks as an unprivileged user of this machine, one user per tenant.

A service started as root (``accelnet serve``) runs each task of a tenant as that tenant's
own user: the one ``--run-as TENANT=USER`` names, or else a system user made for the tenant
on its first task (:func:`tenant_user_name`: ``acn-<tenant>-<hash>``, no home, no login
shell, a group of its own). A command's shell is started with the user's uid and gid and no
supplementary groups, a Python entry point runs in a child of the device's worker that has
dropped to the user; either way with umask 077, in the job's scratch folder, with ``HOME``,
``USER`` and ``LOGNAME`` set for the user. The folders such a task writes (its scratch
folder, its job's output folder) are handed to the user (mode 0700); their parents are made
traversable but not listable (0711), so one user cannot list or enter another's folders, and
the service's own files (its database, tokens, logs) stay the service user's. No two tenants
share a user (a user may read and signal everything of its own): a mapping that would
(``*=USER``, one user named for two tenants, root) is refused.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ANY_TENANT = "*"
SERVICE_TENANT = ""  # the tenant of the service's own tasks (device probes): its own user
_USER_PREFIX = "acn-"


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
    """``TENANT=USER`` items as a map; :class:`RunAsError` naming the item for a malformed
    one, an unknown user, a tenant given twice, a user given to two tenants, ``*`` (every
    tenant under one user), root, or a service that is not root (``euid``, default this
    process's: only root can start tasks as another user)."""
    mapping: dict[str, OsUser] = {}
    for item in items:
        tenant, sep, user = item.partition("=")
        tenant, user = tenant.strip(), user.strip()
        if not sep or not tenant or not user:
            raise RunAsError(f"--run-as {item!r}: expected TENANT=USER")
        if tenant == ANY_TENANT:
            raise RunAsError(
                f"--run-as {item!r}: one user for every tenant would let each tenant's tasks "
                "read the others' outputs and signal their tasks; tenants without a mapping "
                f"get users of their own ({_USER_PREFIX}<tenant>-<hash>, made on first use)"
            )
        if tenant in mapping:
            raise RunAsError(f"--run-as {item!r}: tenant {tenant!r} is mapped twice")
        try:
            found = OsUser.named(user)
        except (KeyError, ValueError):
            raise RunAsError(f"--run-as {item!r}: no user {user!r} on this machine") from None
        if found.uid == 0:
            raise RunAsError(f"--run-as {item!r}: {user!r} is root; tasks never run as root")
        other = next((t for t, u in mapping.items() if u.uid == found.uid), None)
        if other is not None:
            raise RunAsError(
                f"--run-as {item!r}: user {user!r} is already tenant {other!r}'s; two tenants "
                "under one user could read each other's outputs and signal each other's tasks"
            )
        mapping[tenant] = found
    uid = os.geteuid() if euid is None else euid
    if mapping and uid != 0:
        raise RunAsError(
            f"--run-as needs the service to run as root (it runs as uid {uid}): only root "
            "can start tasks as another user"
        )
    return mapping


def tenant_user_name(tenant: str) -> str:
    """The system user made for ``tenant``: ``acn-`` + its name in the characters a user
    name may hold (at most 20) + ``-`` + 6 hex digits of its hash (so tenants whose names
    differ only in other characters get different users); at most 31 characters."""
    clean = re.sub(r"[^a-z0-9_-]", "_", tenant.lower())[:20]
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:6]
    return f"{_USER_PREFIX}{clean}-{digest}"


def make_system_user(name: str) -> OsUser:
    """The system user ``name``, made if missing (``useradd --system``, a group of its own,
    no home, no login shell). RunAsError if it cannot be made."""
    try:
        return OsUser.named(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    shells = ("/usr/sbin/nologin", "/sbin/nologin")
    nologin = next((p for p in shells if os.path.exists(p)), "/bin/false")
    cmd = [useradd, "--system", "--user-group", "--no-create-home",
           "--home-dir", "/nonexistent", "--shell", nologin, name]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunAsError(f"cannot make user {name!r}: {exc}") from None
    try:
        return OsUser.named(name)
    except KeyError:
        why = done.stderr.strip() or f"useradd exited {done.returncode}"
        raise RunAsError(f"cannot make user {name!r}: {why}") from None


class TenantUsers:
    """Who each tenant's tasks run as: the ``--run-as`` mapping first, then (``auto``) a
    user of the tenant's own, made on its first task; None where neither applies (the
    service's own user: ``accelnet.local()``, ``accelnet run``, ``--trusted-tasks``).
    Thread-safe; ``make`` (default :func:`make_system_user`) may raise RunAsError."""

    def __init__(
        self,
        mapped: Mapping[str, OsUser] | None = None,
        *,
        auto: bool = False,
        make: Callable[[str], OsUser] = make_system_user,
    ) -> None:
        self._mapped = dict(mapped or {})
        self._auto = auto
        self._make = make
        self._made: dict[str, OsUser] = {}
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether any task runs as another user than the service's."""
        return self._auto or bool(self._mapped)

    def get(self, tenant: str) -> OsUser | None:
        """The user ``tenant``'s tasks run as (made now if this is the tenant's first);
        None for :data:`SERVICE_TENANT` (the service's own probes run as the service)."""
        user = self._mapped.get(tenant)
        if user is not None or not self._auto or tenant == SERVICE_TENANT:
            return user
        with self._lock:
            made = self._made.get(tenant)
            if made is None:
                made = self._made[tenant] = self._make(tenant_user_name(tenant))
            return made


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
