"""Where elastic memory runs: the default mode, the controller's default settings, and
the rule ``auto`` resolves by (the engine's ``elastic_memory`` and the simulator's
``nightjar`` contender read the same names, so the two cannot drift apart).

>>> elastic_memory_blocker("cuda", draft_model=True, catch_up=True) is None
True
>>> elastic_memory_blocker("xpu", draft_model=True, catch_up=True)
"no KV arena for device type 'xpu' (elastic memory runs on cpu, cuda)"
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from nightjar_ray.memory.controller import ControllerParams

ElasticMode: TypeAlias = Literal["auto"] | bool
"""``True``: run elastic memory (an error where it cannot run); ``False``: never;
``"auto"``: run it where it can (:func:`elastic_memory_blocker` is None)."""

DEFAULT_ELASTIC_MODE: ElasticMode = "auto"
"""The product default of ``elastic_memory.enabled`` and the simulator's ``nightjar``."""

DEFAULT_CONTROLLER_PARAMS = ControllerParams(
    tau_low_fraction=0.10,
    expand_persist_steps=8,
    contract_persist_steps=8,
    offload_outvalued=True,
)
"""The defaults of ``elastic_memory``'s controller fields and of the simulator's knobs."""

KV_ARENA_DEVICE_TYPES = ("cpu", "cuda")
"""Device types (``torch.device.type``) with a KV arena (``arena.py``): elastic memory
runs there."""


def elastic_memory_blocker(device_type: str, *, draft_model: bool, catch_up: bool) -> str | None:
    """Why elastic memory cannot run on an engine of ``device_type`` (a ``torch.device``
    type) whose speculation uses a draft model (``draft_model``) and catches the draft's
    KV up after gamma = 0 (``catch_up``); None when it can."""
    if device_type not in KV_ARENA_DEVICE_TYPES:
        where = ", ".join(KV_ARENA_DEVICE_TYPES)
        return f"no KV arena for device type {device_type!r} (elastic memory runs on {where})"
    if not draft_model:
        return "no draft model to offload (speculative_config.method is not 'draft_model')"
    if not catch_up:
        return "the draft's KV is not rebuilt by the catch-up (draft_sync is not 'catch-up')"
    return None


def resolve_elastic_mode(mode: ElasticMode, blocker: str | None) -> bool:
    """Whether elastic memory runs: ``mode`` where nothing blocks it (``blocker`` None);
    ``"auto"`` turns off where something does; ``True`` there is a ``ValueError``."""
    if mode is True and blocker is not None:
        raise ValueError(f"elastic_memory.enabled is true but {blocker}")
    return mode is True or (mode == "auto" and blocker is None)
