"""The package's floors: which subsystem may import which (docs/architecture.md).

Imports are read from the source with ``ast`` (every ``import`` statement, those inside
functions too), so a lazy import that runs only in another process counts as well.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nightjar_ray"

RANKS = {
    "policy": 0,
    "workload": 0,
    "models": 0,
    "metrics": 1,
    "memory": 2,
    "driver": 2,
    "engine": 3,
    "sim": 3,
    "ops": 4,
    "loadgen": 5,
    "serve": 5,
    "cli": 6,
}
"""A subsystem imports only subsystems of a lower rank (same rank: beside, never)."""
ABOVE_THE_CORE = {"serve", "cli", "loadgen", "ops"}
CORE = {"engine", "memory", "policy", "driver", "metrics", "sim", "workload", "models"}


def _imports(path: Path) -> set[str]:
    """Absolute module names ``path`` imports anywhere in its body."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
IMPORTS = {name: _imports(path) for name, path in MODULES.items()}


def _subsystem(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANKS) else None


def _offenders(subsystems: set[str], forbidden: set[str]) -> list[str]:
    """``module -> import`` pairs where a module of ``subsystems`` imports a name of
    ``forbidden`` (top-level packages, or nightjar_ray subsystems)."""
    found = []
    for module, names in IMPORTS.items():
        if _subsystem(module) not in subsystems:
            continue
        for name in sorted(names):
            parts = name.split(".")
            target = parts[1] if parts[0] == "nightjar_ray" and len(parts) > 1 else parts[0]
            if target in forbidden:
                found.append(f"{module} -> {name}")
    return found


def test_every_subsystem_has_a_rank() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(RANKS), "rank the new subsystem in RANKS (and in the docs)"


def test_policy_imports_no_vllm_ray_or_torch() -> None:
    assert _offenders({"policy"}, {"vllm", "ray", "torch", "triton"}) == []


def test_only_the_engine_imports_vllm() -> None:
    assert _offenders(set(RANKS) - {"engine"}, {"vllm"}) == []


def test_the_core_imports_nothing_above_it() -> None:
    assert _offenders(CORE, ABOVE_THE_CORE) == []


@pytest.mark.parametrize("subsystem", sorted(RANKS))
def test_imports_run_only_down(subsystem: str) -> None:
    above_or_beside = {s for s, rank in RANKS.items() if rank >= RANKS[subsystem]}
    assert _offenders({subsystem}, above_or_beside - {subsystem}) == []


def test_no_import_cycles_between_modules() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, names in IMPORTS.items():
        graph[module] = {n for n in names if n in MODULES and n != module}
    cycle = _find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that returns to its start), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_checks_see_a_lazy_import() -> None:
    source = "def f():\n    from nightjar_ray.serve import context\n"
    tree_names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            tree_names.add(node.module)
    assert tree_names == {"nightjar_ray.serve"}
    assert _find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
