"""policy/ and sim/ stay pure Python: importing them loads neither vllm nor ray."""

from __future__ import annotations

from tests.imports import modules_loaded_by


def test_policy_and_sim_import_neither_vllm_nor_ray() -> None:
    code = (
        "import importlib, pkgutil, nightjar_ray.policy, nightjar_ray.sim\n"
        "for m in pkgutil.iter_modules(nightjar_ray.sim.__path__):\n"
        "    importlib.import_module('nightjar_ray.sim.' + m.name)"
    )
    assert modules_loaded_by(code, ("vllm", "ray", "torch")) == []
