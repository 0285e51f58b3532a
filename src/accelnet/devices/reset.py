"""Resetting a device's hardware: NVIDIA GPUs through ``nvidia-smi --gpu-reset -i <gpu>``.

NVIDIA allows a reset only as root, with no process using the GPU (and, on NVSwitch
systems, sometimes only of all GPUs at once); anything else makes nvidia-smi refuse. A
refused or failed reset is not the device's failure: remediation goes on to its probe,
which decides. The call is made with an injected runner, so tests need no GPU; the real
one runs ``nvidia-smi`` with a timeout. An I/O edge: nothing here runs at import.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence

from accelnet.fabric.model import Device, DeviceKind

Runner = Callable[[Sequence[str], float], tuple[int, str]]


def run_command(argv: Sequence[str], timeout_s: float) -> tuple[int, str]:
    """Run ``argv``; (exit code, stdout and stderr). 127 if it cannot be started, 124 on
    a timeout."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: no answer in {timeout_s:g} s"
    except OSError as exc:
        return 126, f"{argv[0]}: {exc}"
    return done.returncode, (done.stdout + done.stderr).strip()


class NvidiaSmiReset:
    """Resets NVIDIA GPUs with ``nvidia-smi --gpu-reset``; other devices are left alone.

    Called with a fabric device, returns ``(done, detail)``: ``done`` is True only if
    nvidia-smi reported success. The GPU is named by UUID, else PCI bus id, else the
    number ending its name (``gpu3``).
    """

    def __init__(
        self, runner: Runner = run_command, binary: str = "nvidia-smi", timeout_s: float = 60.0
    ) -> None:
        self._run = runner
        self._binary = binary
        self._timeout_s = timeout_s

    def __call__(self, device: Device) -> tuple[bool, str]:
        if device.kind is not DeviceKind.GPU or device.model.vendor != "nvidia":
            return False, ""  # nothing to reset in hardware: not worth a word
        target = device.uuid or device.pci_bus or "".join(c for c in device.name if c.isdigit())
        if not target:
            return False, f"GPU reset skipped: cannot tell which GPU {device.id} is"
        if self._runner_is_default() and shutil.which(self._binary) is None:
            return False, f"GPU reset skipped: {self._binary} not found"
        code, out = self._run([self._binary, "--gpu-reset", "-i", target], self._timeout_s)
        last = out.splitlines()[-1] if out else ""
        if code == 0:
            return True, f"GPU {target} reset ({last or 'nvidia-smi: ok'})"
        lowered = out.lower()
        if "permission" in lowered or "root" in lowered:
            why = "not permitted (needs root)"
        elif "in use" in lowered or "being used" in lowered:
            why = "the GPU is in use by another process"
        elif "not supported" in lowered:
            why = "not supported on this GPU or system"
        else:
            why = f"nvidia-smi exited {code}"
        return False, f"GPU reset not done: {why}" + (f" ({last})" if last else "")

    def _runner_is_default(self) -> bool:
        return self._run is run_command
