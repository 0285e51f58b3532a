"""The logical network: communicators over the fabric, collective algorithms, their
alpha-beta cost, ring ordering and link contention between jobs.

Pure: no I/O but reading and writing calibration files on request. Typical use::

    from accelnet.comm import Communicator, CostModel
    from accelnet.fabric import load_fabric
    comm = Communicator(load_fabric("dgx-h100"), ["gpu0", "gpu1", "gpu2", "gpu3"])
    est = CostModel().estimate(comm, "allreduce", 256 << 20)
    est.algorithm, est.busbw_gbps
"""

from accelnet.comm.algorithms import Algorithm, Collective, Phase, busbw_factor, phases
from accelnet.comm.communicator import CommError, Communicator
from accelnet.comm.cost import Calibration, CostModel, Estimate, LevelFit
from accelnet.comm.flows import Path, max_min_rates

__all__ = [
    "Algorithm",
    "Calibration",
    "Collective",
    "CommError",
    "Communicator",
    "CostModel",
    "Estimate",
    "LevelFit",
    "Path",
    "Phase",
    "busbw_factor",
    "max_min_rates",
    "phases",
]
