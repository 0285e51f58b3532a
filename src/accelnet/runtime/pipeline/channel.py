"""Frames between processes through shared memory: a ring of slots, one writer, one reader.

A :class:`RingSender` and a :class:`RingReceiver` of the same ``name`` in the same folder
(an attempt's ``ACCELNET_SHM``, on a memory file system) make one channel:

- data: a file both processes map. Each of its ``slots`` slots holds one array (the shape
  and dtype of the first one sent), small pickled metadata and the frame's timestamps.
  The reader gets arrays in place, as read-only numpy views (no copy); the writer copies
  each array into its slot once.
- control: a Unix stream socket (the reader listens, the writer connects) carrying 16-byte
  messages: FRAME (slot ``seq % slots`` is full), FREE (the reader is done with it), END
  (the stream is over; a pickled blob follows). A socket ends when its process dies, so a
  dead peer is noticed at once, however it died.

Flow control: the writer fills a slot only when it holds a credit (at most ``slots`` frames
are outstanding), so a slow reader holds a fast writer back and no slot is overwritten
while it is read.

Clean-up: the reader unlinks the socket once connected and the ring file once it has
mapped it (the memory goes with the last process that maps it, however that ends); a
writer that fails unlinks the ring it made. A process that fails writes the folder's
``abort`` file (first writer wins), and a peer still waiting to connect stops on it. The
backend removes the whole folder when the attempt ends.

Blocking calls wait in steps of :data:`POLL_S` to look for the abort file; none spins.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import pickle
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

POLL_S = 0.25  # how often a blocked call looks for the abort file
_HEADER_BYTES = 4096
_ALIGN = 64
_MSG = struct.Struct("<qq")  # (kind, value)
_FRAME, _FREE, _END = 1, 2, 3
_MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to 108 bytes (104 on some systems)
_pause = threading.Event().wait  # a sleep nobody interrupts


class ChannelError(RuntimeError):
    """The channel broke: its peer ended without finishing, never came, or the attempt
    was aborted (the message says which, and why if a stage said)."""


def abort(folder: Path, why: str) -> None:
    """Record that the attempt is failing (the first reason stays); never raises."""
    with contextlib.suppress(OSError):
        fd = os.open(folder / "abort", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(why)


def aborted(folder: Path) -> str | None:
    """Why the attempt is failing, if a stage said so."""
    try:
        return (folder / "abort").read_text(encoding="utf-8") or "aborted"
    except OSError:
        return None


def _check(folder: Path, deadline: float | None, what: str) -> None:
    why = aborted(folder)
    if why is not None:
        raise ChannelError(f"{what}: the pipeline was aborted: {why}")
    if deadline is not None and time.monotonic() >= deadline:
        raise ChannelError(f"{what}: timed out")


@dataclass(slots=True)
class FrameSlot:
    """One frame in a ring: its sequence number, array, timestamps and metadata (views
    into shared memory, valid until the slot is published or released)."""

    seq: int
    array: npt.NDArray[Any]
    stamps: npt.NDArray[np.float64]
    meta: Any = None


class _Ring:
    """The mapped ring file: per-slot views of its fields."""

    def __init__(self, fd: int) -> None:
        head = os.pread(fd, _HEADER_BYTES, 0)
        layout = json.loads(head.rstrip(b"\0").decode())
        self.slots: int = layout["slots"]
        self.meta_bytes: int = layout["meta_bytes"]
        stride, shape, dtype = layout["stride"], tuple(layout["shape"]), np.dtype(layout["dtype"])
        nstamps, payload_at = layout["stamps"], layout["payload_at"]
        self.map = mmap.mmap(fd, _HEADER_BYTES + self.slots * stride)
        base = _HEADER_BYTES
        inner = np.empty(shape, dtype).strides
        self.ints = np.ndarray((self.slots, 2), np.int64, self.map, base, (stride, 8))
        self.stamps = np.ndarray((self.slots, nstamps), np.float64, self.map, base + 16,
                                 (stride, 8))  # fmt: skip
        meta_at = base + 16 + 8 * nstamps
        self.meta = np.ndarray((self.slots, self.meta_bytes), np.uint8, self.map, meta_at,
                               (stride, 1))  # fmt: skip
        self.payload: npt.NDArray[Any] = np.ndarray(
            (self.slots, *shape), dtype, self.map, base + payload_at, (stride, *inner)
        )

    @staticmethod
    def create(
        path: Path,
        slots: int,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        stamps: int,
        meta_bytes: int,
    ) -> _Ring:
        meta_at = 16 + 8 * stamps
        payload_at = -(-(meta_at + meta_bytes) // _ALIGN) * _ALIGN
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        stride = -(-(payload_at + nbytes) // _ALIGN) * _ALIGN
        layout = {"magic": "accelnet-ring/1", "slots": slots, "shape": list(shape),
                  "dtype": dtype.str, "stamps": stamps, "meta_bytes": meta_bytes,
                  "stride": stride, "payload_at": payload_at}  # fmt: skip
        tmp = path.with_name(path.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a leftover of ours; never reuse a file someone else made
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, _HEADER_BYTES + slots * stride)
            os.pwrite(fd, json.dumps(layout).encode(), 0)
            ring = _Ring(fd)
            os.replace(tmp, path)  # appears whole
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        finally:
            os.close(fd)
        return ring

    @staticmethod
    def open(path: Path) -> _Ring:
        fd = os.open(path, os.O_RDWR)
        try:
            return _Ring(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        del self.ints, self.stamps, self.meta, self.payload
        with contextlib.suppress(BufferError):  # a view someone kept: the GC unmaps it
            self.map.close()


class _Link:
    """A connected control socket: messages, waiting in steps that look for an abort."""

    def __init__(self, sock: socket.socket, folder: Path, what: str) -> None:
        self.sock = sock
        self.folder = folder
        self.what = what
        sock.settimeout(POLL_S)

    def gone(self, detail: str = "") -> ChannelError:
        """The error for a peer that went away mid-stream (with the abort reason, if any)."""
        why = aborted(self.folder)
        return ChannelError(
            f"{self.what}: the other side ended without finishing the stream"
            + (f" ({detail})" if detail else "")
            + (f": {why}" if why else "")
        )

    def send(self, kind: int, value: int, blob: bytes = b"") -> None:
        try:
            self.sock.sendall(_MSG.pack(kind, value) + blob)
        except OSError as e:
            raise self.gone(e.strerror or str(e)) from None

    def recv(self, n: int = _MSG.size) -> bytes:
        """Exactly ``n`` bytes; ChannelError at EOF or on an abort."""
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except TimeoutError:
                _check(self.folder, None, self.what)
                continue
            except OSError as e:
                raise self.gone(e.strerror or str(e)) from None
            if not chunk:
                raise self.gone()
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _socket_path(folder: Path, name: str) -> str:
    path = str(folder / f"{name}.sock")
    if len(path.encode()) > _MAX_SOCKET_PATH:
        raise ValueError(f"socket path too long for AF_UNIX ({len(path)} bytes): {path}")
    return path


class RingSender:
    """The writing end of channel ``name`` in ``folder``. One thread uses it."""

    def __init__(
        self,
        folder: Path,
        name: str,
        slots: int = 4,
        stamps: int = 0,
        meta_bytes: int = 16384,
        timeout_s: float = 60.0,
    ) -> None:
        """``slots``: frames in flight at most; ``stamps``: float64 timestamps per frame;
        ``meta_bytes``: room for each frame's pickled metadata; ``timeout_s``: how long to
        wait for the reader to come."""
        if slots < 1 or stamps < 0 or meta_bytes < 0:
            raise ValueError("slots must be >= 1, stamps and meta_bytes >= 0")
        self.folder, self.name = folder, name
        self.slots, self.nstamps, self.meta_bytes = slots, stamps, meta_bytes
        self.timeout_s = timeout_s
        self.ring_path = folder / f"{name}.ring"
        self._sock_path = _socket_path(folder, name)
        self._ring: _Ring | None = None
        self._link: _Link | None = None
        self._seq = 0  # next frame
        self._freed = 0  # frames the reader has released
        self._done = False  # finished: nothing is left to close

    def _connect(self) -> _Link:
        what = f"channel {self.name} (writer)"
        deadline = time.monotonic() + self.timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self._sock_path)
                return _Link(sock, self.folder, what)
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
            _check(self.folder, deadline, f"{what}: waiting for the reader")
            _pause(0.002)

    def acquire(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> FrameSlot:
        """The next free slot (waits for one: backpressure), for an array of ``shape`` and
        ``dtype``, which must be those of the first frame. Fill ``slot.array`` and
        ``slot.stamps``, then :meth:`publish` it."""
        if self._ring is None:
            self._ring = _Ring.create(self.ring_path, self.slots, tuple(shape), np.dtype(dtype),
                                      self.nstamps, self.meta_bytes)  # fmt: skip
            self._link = self._connect()
        ring, link = self._ring, self._link
        assert link is not None
        i = self._seq % ring.slots
        if ring.payload.shape[1:] != tuple(shape) or ring.payload.dtype != np.dtype(dtype):
            raise ValueError(
                f"channel {self.name}: frames are {ring.payload.dtype} "
                f"{ring.payload.shape[1:]}, got {np.dtype(dtype)} {tuple(shape)}"
            )
        self._drain(ring.slots - 1)
        return FrameSlot(self._seq, ring.payload[i], ring.stamps[i])

    def _drain(self, outstanding: int) -> None:
        """Wait until at most ``outstanding`` frames are unreleased."""
        link = self._link
        assert link is not None
        while self._seq - self._freed > outstanding:
            kind, value = _MSG.unpack(link.recv())
            if kind != _FREE or value != self._freed:
                raise ChannelError(f"channel {self.name}: unexpected message {kind} {value}")
            self._freed += 1

    def publish(self, slot: FrameSlot, meta: Any = None) -> None:
        """Hand ``slot`` (from :meth:`acquire`) with ``meta`` (pickled into the slot) to the
        reader. ValueError if the pickled metadata exceeds ``meta_bytes``."""
        ring, link = self._ring, self._link
        assert ring is not None and link is not None and slot.seq == self._seq
        i = slot.seq % ring.slots
        blob = b"" if meta is None else pickle.dumps(meta, protocol=5)
        if len(blob) > ring.meta_bytes:
            raise ValueError(
                f"channel {self.name}: frame metadata of {len(blob)} bytes exceeds "
                f"meta_bytes={ring.meta_bytes}"
            )
        ring.meta[i, : len(blob)] = np.frombuffer(blob, np.uint8)
        ring.ints[i] = (slot.seq, len(blob))
        link.send(_FRAME, slot.seq)
        self._seq += 1

    def finish(self, final: Any = None) -> None:
        """End the stream once the reader has released every frame, handing ``final``
        (pickled) to it; closes the channel. Blocks until then."""
        if self._link is None:
            self._link = self._connect()
        self._drain(0)
        blob = pickle.dumps(final, protocol=5)
        self._link.send(_END, len(blob), blob)
        self.close(failed=False)
        self._done = True

    def close(self, failed: bool = True) -> None:
        """Let the channel go (idempotent; a no-op after :meth:`finish`); after a failure,
        unlink the ring file too (the reader may never have mapped it)."""
        if self._done:
            return
        if self._link is not None:
            self._link.close()
            self._link = None
        if failed:
            with contextlib.suppress(OSError):
                os.unlink(self.ring_path)
        if self._ring is not None:
            self._ring.close()
            self._ring = None


class RingReceiver:
    """The reading end of channel ``name`` in ``folder``; listens from its creation. One
    thread uses it."""

    def __init__(self, folder: Path, name: str, timeout_s: float = 60.0) -> None:
        """``timeout_s``: how long to wait for the writer to connect."""
        self.folder, self.name = folder, name
        self.timeout_s = timeout_s
        self.ring_path = folder / f"{name}.ring"
        self.final: Any = None  # what the writer handed over at the end
        self._sock_path = _socket_path(folder, name)
        self._listener: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._sock_path)  # a stale one from a reader of an earlier run
        self._listener.bind(self._sock_path)
        self._listener.listen(1)
        self._link: _Link | None = None
        self._ring: _Ring | None = None
        self._next = 0
        self.ended = False

    def _accept(self) -> _Link:
        listener = self._listener
        assert listener is not None
        what = f"channel {self.name} (reader)"
        listener.settimeout(POLL_S)
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                try:
                    sock, _ = listener.accept()
                    return _Link(sock, self.folder, what)
                except TimeoutError:
                    _check(self.folder, deadline, f"{what}: waiting for the writer")
        finally:
            self._close_listener()

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            with contextlib.suppress(OSError):
                os.unlink(self._sock_path)

    def get(self) -> FrameSlot | None:
        """The next frame (waits for it), or None once the stream has ended (``final``
        then holds what the writer handed over). The slot's ``array`` is a read-only view
        into shared memory, valid until :meth:`release`."""
        if self.ended:
            return None
        if self._link is None:
            self._link = self._accept()
        kind, value = _MSG.unpack(self._link.recv())
        if kind == _END:
            self.final = pickle.loads(self._link.recv(value)) if value else None
            self.ended = True
            return None
        if kind != _FRAME or value != self._next:
            raise ChannelError(f"channel {self.name}: unexpected message {kind} {value}")
        if self._ring is None:
            self._ring = _Ring.open(self.ring_path)
            with contextlib.suppress(OSError):
                os.unlink(self.ring_path)  # both ends have it: the name is not needed
        ring = self._ring
        i = value % ring.slots
        seq, meta_len = (int(x) for x in ring.ints[i])
        if seq != value:
            raise ChannelError(f"channel {self.name}: slot {i} holds frame {seq}, not {value}")
        meta = pickle.loads(ring.meta[i, :meta_len].tobytes()) if meta_len else None
        array = ring.payload[i]
        array.flags.writeable = False
        self._next += 1
        return FrameSlot(value, array, ring.stamps[i], meta)

    def release(self, slot: FrameSlot) -> None:
        """Give ``slot`` back to the writer (its views must not be used after)."""
        assert self._link is not None
        self._link.send(_FREE, slot.seq)

    def close(self) -> None:
        """Let the channel go (idempotent); unlinks its socket and ring file if left."""
        self._close_listener()
        if self._link is not None:
            self._link.close()
            self._link = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        with contextlib.suppress(OSError):
            os.unlink(self.ring_path)
