"""One request's measured timeline, from the simulator or over HTTP."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """What one request did; times in seconds from the run's start.

    TTFT = first token - sent, E2E = finish - sent, TPOT = (finish - first token) /
    (output tokens - 1), as ``vllm bench serve`` defines them. The simulator sends a
    request when it arrives (``sent_s == arrival_s``). A failed request (``status`` not
    ``ok``) is a record too; the times it never reached are ``None``. Fields only one side
    can measure are ``None`` (or empty) on the other.
    """

    req_id: int
    arrival_s: float
    """When the workload says it arrives."""
    sent_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    """Tokens generated (over HTTP: the server's usage count)."""
    first_token_s: float | None
    """The first token (over HTTP: the first streamed chunk with text)."""
    finish_s: float | None
    """The last token (over HTTP: the end of the stream)."""
    status: str = "ok"
    """``ok``, ``http_<code>`` or ``error``."""
    error: str = ""
    max_tokens: int | None = None
    """Output tokens asked for (over HTTP)."""
    itl_s: tuple[float, ...] = ()
    """Gaps between consecutive streamed chunks with text (over HTTP)."""
    text: str | None = None
    """The generated text (over HTTP)."""
    num_preemptions: int | None = None
    """Times the scheduler preempted the request (the simulator)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ttft_s(self) -> float | None:
        """Time to first token, from sending."""
        return None if self.first_token_s is None else self.first_token_s - self.sent_s

    @property
    def e2e_s(self) -> float | None:
        """End-to-end latency, from sending."""
        return None if self.finish_s is None else self.finish_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first; ``None`` for a failed request or one
        with fewer than two output tokens."""
        first, finish = self.first_token_s, self.finish_s
        if not self.ok or self.num_output_tokens < 2 or first is None or finish is None:
            return None
        return (finish - first) / (self.num_output_tokens - 1)
