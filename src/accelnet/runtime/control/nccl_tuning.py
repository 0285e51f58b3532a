"""NCCL tuned from the fabric, for the controller's launches (issue 23 item 4).

For a gang of two or more NVIDIA GPUs (:func:`accelnet.comm.nccl.is_nccl_device`), the
ranks are numbered in the ring order :func:`accelnet.comm.nccl.ring_devices` finds for the
placed devices (rank 0's device stays first), so a ring collective's neighbours are the
fabric's best neighbours and, for a job launched per host, the host's devices (thus
``CUDA_VISIBLE_DEVICES``, which the backend writes in that order) follow the ring. Each
task gets NCCL's variables for its host: ``NCCL_TOPO_FILE`` (the host as the fabric models
it, NCCL's XML, written once per host under ``<workdir>/nccl``), ``NCCL_IB_HCA``,
``NCCL_SOCKET_IFNAME`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. ``CUDA_VISIBLE_DEVICES``
itself stays the backend's (an emulated fabric shows no real GPU). The job's own ``env``
overrides any of them.

Every other job (one device, any other kind) is launched as placed, with nothing added,
and costs one check per device. Attached to the controllers of clusters that run tasks
(:class:`accelnet.runtime.sdk.LocalCluster`); the simulator's has none. Rings are kept per
placement (the search over a 9-GPU placement tries 20,160 rings), topology files per host.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from accelnet.comm.nccl import is_nccl_device, nccl_env, nccl_topo_xml, ring_devices
from accelnet.fabric import Fabric

RINGS_KEPT = 256


class NcclTuning:
    """Ring orders and NCCL variables for the gangs a controller launches on ``fabric``;
    topology files written under ``folder``."""

    def __init__(self, fabric: Fabric, folder: Path) -> None:
        self.fabric = fabric
        self.folder = folder
        self._rings: OrderedDict[tuple[str, ...], tuple[str, ...]] = OrderedDict()
        self._files: dict[str, str] = {}  # host -> its topology file

    def applies(self, devices: Sequence[str]) -> bool:
        """Whether a gang on ``devices`` is tuned: two or more, every one an NVIDIA GPU."""
        if len(devices) < 2:
            return False
        known = self.fabric.devices
        return all(is_nccl_device(known[d]) for d in devices)

    def ring(self, devices: Sequence[str]) -> tuple[str, ...]:
        """``devices`` in ring order (rank 0's first), kept per placement."""
        key = tuple(devices)
        found = self._rings.get(key)
        if found is None:
            found = self._rings[key] = ring_devices(self.fabric, key)
            while len(self._rings) > RINGS_KEPT:
                self._rings.popitem(last=False)
        else:
            self._rings.move_to_end(key)
        return found

    def env(self, ring: Sequence[str], host: str) -> dict[str, str]:
        """NCCL's variables for the task of the gang ``ring`` (in ring order) on ``host``,
        without ``CUDA_VISIBLE_DEVICES`` (the backend's); without ``NCCL_TOPO_FILE`` if
        the file could not be written."""
        env = nccl_env(self.fabric, ring, host, self._topo_file(host), ring=ring)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        return env

    def _topo_file(self, host: str) -> str | None:
        """Where ``host``'s topology file is (written the first time it is asked for,
        readable by every user: tasks may run as a tenant's own); None if it cannot be
        written."""
        path = self._files.get(host)
        if path is not None:
            return path
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            os.chmod(self.folder, 0o755)
            dest = self.folder / f"{host.replace('/', '_')}.xml"
            tmp = dest.with_suffix(".tmp")
            tmp.write_text(nccl_topo_xml(self.fabric, host))
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest)
        except OSError:
            return None
        path = self._files[host] = str(dest)
        return path
