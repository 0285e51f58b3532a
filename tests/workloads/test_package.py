"""``accelnet.workloads``: importing the package costs nothing and does nothing."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_loads_no_heavy_module() -> None:
    code = (
        "import sys, accelnet.workloads\n"
        "heavy = {'numpy', 'sklearn', 'scipy', 'polars', 'PIL'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
