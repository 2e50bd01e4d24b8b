"""One request of a workload: when it arrives and what it asks for."""

from __future__ import annotations

from dataclasses import dataclass

Prompt = tuple[int, ...] | str
"""What an HTTP client sends as the completions API's ``prompt``: token IDs or text."""


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload; ``arrival_s`` in seconds from the workload's start.

    The simulator needs the lengths only; an HTTP client also sends ``prompt`` and asks
    for exactly ``num_output_tokens`` (``max_tokens`` with ``ignore_eos``).
    """

    req_id: int
    arrival_s: float
    num_prompt_tokens: int
    """Prompt length in tokens: ``len(prompt)`` for token IDs; 0 for a text prompt (the
    server counts its tokens, and the request's record carries that count)."""
    num_output_tokens: int
    """Tokens to generate."""
    prompt: Prompt | None = None
    """Token IDs or text; ``None`` where only the lengths matter (the simulator)."""

    def __post_init__(self) -> None:
        if isinstance(self.prompt, tuple) and len(self.prompt) != self.num_prompt_tokens:
            raise ValueError(
                f"request {self.req_id}: prompt has {len(self.prompt)} token IDs but "
                f"num_prompt_tokens is {self.num_prompt_tokens}"
            )
