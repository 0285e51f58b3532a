"""Data hand-off on this machine: jobs' output folders and attempts' shared memory.

Between jobs: every job has an output folder, ``<workdir>/outputs/<job id>``, named in its
tasks' ``ACCELNET_OUTPUT`` and made on first use (:func:`output_dir`; a shell command runs
``mkdir -p "$ACCELNET_OUTPUT"``). A job whose spec names ``inputs`` gets each input job's
output folder in ``ACCELNET_INPUT_<ALIAS>`` (the aliases, comma-separated, in
``ACCELNET_INPUTS``): the very files the input job wrote, read or memory-mapped in place,
never copied.

Within a job: ``ACCELNET_SHM`` names a folder on a memory file system (``/dev/shm`` where
there is one) private to the job's current attempt, for the shared memory its tasks
stream data through (:mod:`accelnet.runtime.pipeline.channel`). The backend names it (a random
part no one sharing the memory file system can guess, so no one can make it first and read
what the tasks write there) and its worker makes it (mode 0700) as the task starts (when
tasks run as users, the backend makes it here, under a name no one had taken, and gives it
to the task's user). The backend removes it when the
attempt's last task has ended, however it ended (a killed task cannot clean up after
itself). Each backend holds a lock on an owner file next to its folders for as long as it
lives; a backend that starts removes the folders of owners nobody holds any more (a
backend that crashed), whatever process or container it was in.

:class:`HandoffArea` is the backend's side (names, creation, removal); the functions are a
task's side (they read the environment the backend set).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from accelnet.runtime.backend import TaskSpec
from accelnet.runtime.local.worker import free_port

OUTPUT_ENV = "ACCELNET_OUTPUT"
# MASTER_PORT's value (and PET_MASTER_PORT's) in a run request when the task's worker picks
# a port free as the task starts (free_port, there): an attempt of one task
PORT_AT_START = ""
PORT_VARS = ("MASTER_PORT", "PET_MASTER_PORT")
ADDR_VARS = ("MASTER_ADDR", "PET_MASTER_ADDR")  # set with them
_UNSAFE = re.compile(r"[^\w.-]")  # what a job id's output folder name has as "_"
# the same folder for every attempt of a job: <its output folder>/checkpoint (made by the task)
CHECKPOINT_ENV = "ACCELNET_CHECKPOINT_DIR"
CHECKPOINT_DIR = "checkpoint"  # the checkpoint folder's name in a job's output folder
INPUTS_ENV = "ACCELNET_INPUTS"
INPUT_ENV_PREFIX = "ACCELNET_INPUT_"
SHM_ENV = "ACCELNET_SHM"
_SHM_PREFIX = "accelnet-"
_OWNER_SUFFIX = ".owner"


# ----- a task's side ------------------------------------------------------------------------
def _env_path(name: str) -> Path:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(
            f"{name} is not set: this runs outside an accelnet task, or on a backend "
            "without data hand-off"
        )
    return Path(value)


def output_dir() -> Path:
    """This job's output folder (``ACCELNET_OUTPUT``), created if missing. RuntimeError
    outside a task of a backend with data hand-off."""
    path = _env_path(OUTPUT_ENV)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)  # the job's own: 0700
    return path


def input_dirs() -> dict[str, Path]:
    """The output folder of each input job, by alias (empty for a job without inputs). A
    folder is missing if its job wrote nothing."""
    names = [a for a in os.environ.get(INPUTS_ENV, "").split(",") if a]
    return {a: _env_path(input_env(a)) for a in names}


def input_env(alias: str) -> str:
    """The variable that holds input ``alias``'s folder: ``ACCELNET_INPUT_<ALIAS>``."""
    return INPUT_ENV_PREFIX + alias.upper()


def shm_dir() -> Path:
    """This attempt's shared-memory folder (``ACCELNET_SHM``; the backend's worker makes it
    as the task starts, or under ``--run-as`` the backend, mode 0700, the task's user's),
    created if missing.
    ``PermissionError`` if it belongs to another user or others may enter it: under a
    shared ``/dev/shm`` someone else could have made it to read what the task writes
    there."""
    path = _env_path(SHM_ENV)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _own_private(path)
    return path


def _own_private(path: Path) -> None:
    st = os.lstat(path)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077 or not stat.S_ISDIR(st.st_mode):
        raise PermissionError(
            f"{path} is not this user's private folder (owner uid {st.st_uid}, mode "
            f"{st.st_mode & 0o777:o}): refusing to use it for shared memory"
        )


# ----- a backend's side ---------------------------------------------------------------------
def shm_base() -> Path:
    """Where attempts' shared-memory folders go: ``/dev/shm`` if it is a writable folder,
    else the temporary folder."""
    dev_shm = Path("/dev/shm")
    if dev_shm.is_dir() and os.access(dev_shm, os.W_OK | os.X_OK):
        return dev_shm
    return Path(tempfile.gettempdir())


def _claim(path: Path) -> int:
    """Create ``path`` locked (it appears already locked: made aside, then renamed); the
    descriptor that holds the lock."""
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, path)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return fd


def sweep(base: Path) -> list[Path]:
    """Remove the shared-memory folders under ``base`` whose owner nobody holds (their
    backend is gone), with the owner files; the folders removed. Never raises."""
    removed = []
    with contextlib.suppress(OSError):
        for owner in sorted(base.glob(f"{_SHM_PREFIX}*{_OWNER_SUFFIX}")):
            try:
                fd = os.open(owner, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: its backend lives
            else:
                stem = owner.name.removesuffix(_OWNER_SUFFIX)
                for folder in base.glob(f"{stem}-*"):
                    shutil.rmtree(folder, ignore_errors=True)
                    removed.append(folder)
                with contextlib.suppress(OSError):
                    owner.unlink()
            finally:
                os.close(fd)
    return removed


def _remove(folder: str | Path) -> None:
    """Remove ``folder`` and what is in it; never raises. Most attempts leave their folder
    empty: one ``rmdir`` then, the tree walk only when that fails."""
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(slots=True)
class _Attempt:
    shm: str  # its shared-memory folder
    world: int
    running: set[str] = field(default_factory=set)
    ended: int = 0
    port: int | None = None  # MASTER_PORT, for ranks whose launcher did not set one
    made: bool = False  # its folder made by the backend (tasks that run as users)


class HandoffArea:
    """A backend's output folders (``<workdir>/outputs``) and attempts' shared-memory
    folders (under ``base``, by default :func:`shm_base`). Not thread-safe: the backend's
    thread calls it."""

    def __init__(self, workdir: str | Path, base: Path | None = None) -> None:
        self.outputs = Path(workdir).resolve() / "outputs"
        self.base = base if base is not None else shm_base()
        self._stem = f"{_SHM_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self._owner: int | None = None  # the locked owner file, made with the first folder
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        self._tasks: dict[str, tuple[str, int]] = {}  # running task -> its attempt
        self._made = 0
        self._outputs_made = False  # made once; a task that finds it gone makes it again
        self._given: dict[str, int] = {}  # attempt folder -> the user it was given to
        self._random = b""  # os.urandom's bytes, drawn a batch at a time (_token)
        self._taken = 0
        sweep(self.base)

    def output(self, job_id: str) -> Path:
        """``job_id``'s output folder (not created here)."""
        return Path(self._output(job_id))

    def _output(self, job_id: str) -> str:
        name = _UNSAFE.sub("_", job_id)
        return f"{self.outputs}/{'_' if name in ('', '.', '..') else name}"

    def _token(self) -> str:
        """16 random hex digits (``secrets.token_hex(8)``'s, from a batch of the same
        source: one system call per 512 folders, not one each)."""
        if self._taken + 8 > len(self._random):
            self._random, self._taken = os.urandom(4096), 0
        self._taken += 8
        return self._random[self._taken - 8 : self._taken].hex()

    def task_env(
        self, task: TaskSpec, local_world: int | None = None, make: bool = False
    ) -> dict[str, str]:
        """The hand-off variables of a task being launched; registers it with its
        attempt (whose shared memory lives until :meth:`task_ended` of its last task here:
        of ``local_world`` tasks, by default ``task.world``; fewer when the other ranks run
        on other machines). Creates ``outputs`` (mode 0700, so jobs' output folders are
        the service user's only); the task makes the folders it uses. OSError (the task
        registered all the same) if the folders' base cannot be made. A task with
        ``rendezvous`` variables but no ``MASTER_PORT`` (its ranks all run here) also gets
        ``MASTER_ADDR`` 127.0.0.1 and a port free now, the same for all of its attempt
        (:data:`PORT_AT_START` for an attempt of one task: its worker picks the port). The
        attempt's shared-memory folder is named, and made here only with ``make`` (tasks
        that run as users: :meth:`give` hands it over), else by the task's worker."""
        if not self._outputs_made:
            with contextlib.suppress(OSError):  # else the task's own mkdir reports it
                self.outputs.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._outputs_made = True
        key = (task.job_id, task.attempt)
        attempt = self._attempts.get(key)
        if attempt is None:
            self._made += 1
            attempt = self._attempts[key] = _Attempt(self._new_shm(), local_world or task.world)
        # registered first: a task whose launch fails from here on still counts for its
        # attempt (task_ended), whose folder then goes with its last task
        self._tasks[task.task_id] = key
        attempt.running.add(task.task_id)
        if self._owner is None:  # OSError: no base for the folders (the launch fails)
            self.base.mkdir(parents=True, exist_ok=True)
            self._owner = _claim(self.base / f"{self._stem}{_OWNER_SUFFIX}")
        if make and not attempt.made:
            attempt.shm, attempt.made = self._made_shm(attempt.shm), True
        output = self._output(task.job_id)
        env = {OUTPUT_ENV: output, CHECKPOINT_ENV: f"{output}/{CHECKPOINT_DIR}",
               SHM_ENV: attempt.shm}  # fmt: skip
        if task.rendezvous and "MASTER_PORT" not in task.rendezvous:
            # every rank of the attempt runs on this machine: rank 0 listens here, on a port
            # free now, the same for all of its ranks; the worker of an attempt of one task
            # picks it as the task starts (PORT_AT_START), off the controller's path
            port: str | None = PORT_AT_START
            if attempt.world > 1:
                if attempt.port is None:
                    attempt.port = free_port()
                port = None if attempt.port is None else str(attempt.port)
            if port is not None:
                env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", port
        if task.inputs:
            env[INPUTS_ENV] = ",".join(sorted(task.inputs))
            for alias, job in task.inputs.items():
                env[input_env(alias)] = self._output(job)
        return env

    def _new_shm(self) -> str:
        """A fresh attempt folder's path, not made (the task's worker makes it, mode 0700,
        as the task starts; or :meth:`_made_shm`): a random part, so no one sharing the
        base can guess it and make it first."""
        return f"{self.base}/{self._stem}-{self._made}-{self._token()}"

    def _made_shm(self, path: str) -> str:
        """Attempt folder ``path`` made here, mode 0700, or if that name is taken already
        (by anyone: it is never used), another drawn; for a task that runs as a user
        (:meth:`give`). If it cannot be made, the task's ``shm_dir()`` says why."""
        while True:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                path = self._new_shm()
                continue
            except OSError:
                pass
            return path

    def give(self, shm: str, uid: int, gid: int) -> None:
        """Give attempt folder ``shm`` (made by :meth:`task_env` with ``make``) to the user
        ``uid`` a task of the attempt runs as: opened without following a link, and only
        if it is private and the backend's, as made (its first task), or that user's, as
        given (a later rank's); PermissionError for anything else, which fails the task's
        launch. Nothing if it is not there (it could not be made: the task's ``shm_dir()``
        says why)."""
        try:
            fd = os.open(shm, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as e:
            raise PermissionError(f"{shm} is not a folder the backend made: {e}") from e
        try:
            st = os.fstat(fd)
            owner = self._given.get(shm, os.geteuid())
            if st.st_uid != owner or st.st_mode & 0o077:
                raise PermissionError(
                    f"{shm} belongs to uid {st.st_uid} (mode {st.st_mode & 0o777:o}), not to "
                    f"uid {owner} as the backend left it: refusing to hand it over"
                )
            if owner != uid:
                os.fchown(fd, uid, gid)
                self._given[shm] = uid
        finally:
            os.close(fd)

    def task_ended(self, task_id: str) -> None:
        """A task registered by :meth:`task_env` has ended (idempotent); when it was its
        attempt's last (every rank has ended, none runs), the attempt's shared memory is
        removed."""
        key = self._tasks.pop(task_id, None)
        attempt = None if key is None else self._attempts.get(key)
        if key is None or attempt is None:
            return
        attempt.running.discard(task_id)
        attempt.ended += 1
        if attempt.ended >= attempt.world and not attempt.running:
            del self._attempts[key]
            _remove(attempt.shm)
            self._given.pop(attempt.shm, None)

    def live_shm(self) -> list[Path]:
        """The shared-memory folders of attempts still running (diagnostics, tests)."""
        return [Path(a.shm) for a in self._attempts.values()]

    def close(self) -> None:
        """Remove every attempt's shared memory and the owner file (the backend is
        closing); idempotent."""
        for attempt in self._attempts.values():
            shutil.rmtree(attempt.shm, ignore_errors=True)
        self._attempts.clear()
        self._tasks.clear()
        self._given.clear()
        if self._owner is not None:
            with contextlib.suppress(OSError):
                (self.base / f"{self._stem}{_OWNER_SUFFIX}").unlink()
            os.close(self._owner)
            self._owner = None
