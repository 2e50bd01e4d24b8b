"""Plain offline engines that decode the reference outputs of the lossless checks.

An engine start costs tens of seconds on the 2-core machine and its greedy outputs
depend only on the target's weights and the engine arguments, so one plain engine
(no speculative config) per (target weights, arguments, start environment) serves
every test of the session that asks for it. Engines start on first use and shut down
together, last started first, when the session ends. Each use starts from an empty
prefix cache.

They run in spawned processes, as vLLM starts them by default, whatever the module that
starts one runs its engines under test with: an engine that shares the test process with
another shares its distributed groups, and outlives it here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.models.pair import ModelPair

IN_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
"""vLLM's switch: ``1`` (its default) starts the engine core and its workers in their own
processes; ``0`` runs the engine core in the caller's process and, on CPU, the
single-rank worker with it (vLLM's CPU platform keeps the uni executor then)."""
SPAWNED = {IN_PROCESS_ENV: "1"}


def weights_digest(model_dir: Path) -> str:
    """SHA-256 over a model directory's config and weight files."""
    digest = hashlib.sha256()
    for path in [*sorted(model_dir.glob("*.safetensors")), model_dir / "config.json"]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class ReferenceEngines:
    """Started plain engines by (target weights, engine arguments, environment)."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._engines: dict[tuple[str, str], Any] = {}
        self._digests: dict[Path, str] = {}

    def engine(
        self, pair: ModelPair, *, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> Any:
        """The plain engine on ``pair``'s target with ``kwargs`` (``offline_engine``'s),
        started with ``env`` set if it is not running yet; its prefix cache is emptied,
        so every caller decodes as on a fresh engine."""
        from nightjar_ray.engine.offline import offline_engine

        kwargs = {"dtype": pair.spec.dtype, **kwargs}
        if pair.target_dir not in self._digests:
            self._digests[pair.target_dir] = weights_digest(pair.target_dir)
        arguments = json.dumps({"engine": kwargs, "env": dict(env or {})}, sort_keys=True)
        key = (self._digests[pair.target_dir], arguments)
        if key not in self._engines:
            with pytest.MonkeyPatch.context() as patch:  # the engine's processes inherit it
                for name, value in {**(env or {}), **SPAWNED}.items():
                    patch.setenv(name, value)
                engine = self._stack.enter_context(offline_engine(pair, None, **kwargs))
            self._engines[key] = engine
        engine = self._engines[key]
        assert engine.reset_prefix_cache(), "a reference engine still runs requests"
        return engine

    def outputs(
        self,
        pair: ModelPair,
        prompts: Sequence[list[int]],
        max_tokens: int,
        *,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> list[list[int]]:
        """Greedy token ids of ``prompts`` decoded as one batch."""
        from nightjar_ray.engine.offline import run_batch

        return run_batch(self.engine(pair, env=env, **kwargs), prompts, max_tokens).token_ids

    def close(self) -> None:
        self._stack.close()
