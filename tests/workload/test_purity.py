"""workload/ is a bottom package: the standard library only, no other nightjar_ray package."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import importlib, json, pkgutil, sys
at_start = set(sys.modules)  # the interpreter's own (and an editable install's finder)
import nightjar_ray.workload
for m in pkgutil.iter_modules(nightjar_ray.workload.__path__):
    importlib.import_module("nightjar_ray.workload." + m.name)
roots = {m.split(".")[0] for m in set(sys.modules) - at_start}
print(json.dumps({
    "outside_stdlib": sorted(roots - set(sys.stdlib_module_names) - {"nightjar_ray"}),
    "nightjar_ray": sorted(m for m in sys.modules if m.startswith("nightjar_ray.")),
}))
"""


def test_workload_imports_only_the_standard_library() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "nightjar_ray.workload.trace" in loaded["nightjar_ray"]  # every module imported
    assert [m for m in loaded["nightjar_ray"] if not m.startswith("nightjar_ray.workload")] == []
    assert loaded["outside_stdlib"] == []
