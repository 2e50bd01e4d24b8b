"""policy/ and sim/ stay pure Python: importing them loads neither vllm nor ray."""

from __future__ import annotations

import subprocess
import sys


def test_policy_and_sim_import_neither_vllm_nor_ray() -> None:
    code = (
        "import sys, pkgutil, importlib, nightjar_ray.policy, nightjar_ray.sim;"
        "[importlib.import_module('nightjar_ray.sim.' + m.name)"
        " for m in pkgutil.iter_modules(nightjar_ray.sim.__path__)];"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'ray', 'torch'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
