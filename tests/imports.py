"""Which top-level packages a piece of import code loads, checked in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable


def modules_loaded_by(code: str, roots: Iterable[str]) -> list[str]:
    """Run ``code`` in a new Python process; return the loaded modules under ``roots``."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"roots = {sorted(roots)!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in roots)))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded
