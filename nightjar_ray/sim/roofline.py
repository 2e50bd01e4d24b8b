"""Roofline cost of forward passes and of one speculative engine step.

One forward pass of a model over a batch of query tokens costs::

    t = max(W/tp / BW, 2*P_body*T/tp / F)              linear layers (weights read once)
      + max(KV_read/tp / BW, 4*L*H*d*pairs/tp / F)     attention (each request's KV read once)
      + 2*L*(lat + 2*(tp-1)/tp * T*h*2 / BW_link)       TP all-reduces (tp > 1)
      + L * per_layer_overhead                           launches
      + logits: max(LM head bytes..., 2*V*h*T_logit/tp / F)

with ``BW``/``F`` the achieved bandwidth / FLOP/s. A speculative decode step with length
gamma over B requests is (paper §2.1: draft time + verification time)::

    draft pass 1 over each request's pending token (+ tokens it lags, C_switch)
    + (gamma - 1) draft passes of B tokens
    + one target pass over B*(gamma+1) tokens (+ prefill chunks sharing the step)
"""

from __future__ import annotations

from dataclasses import dataclass

from nightjar_ray.sim.hardware import EngineOverheads, HardwareProfile, ModelShape


@dataclass(frozen=True)
class ForwardBatch:
    """What one forward pass processes, summed over the requests in it."""

    num_tokens: int
    """Query tokens (prefill chunk tokens + decode/verify tokens)."""
    num_logit_tokens: int
    """Positions whose logits are computed (last token of a prefill, every verified token)."""
    kv_read_tokens: int
    """Tokens of KV read by attention: each request's context length, once per pass."""
    attn_pairs: int
    """(query, key) pairs attention computes: sum over requests of q * (context + (q+1)/2)."""


def attn_pairs(num_query_tokens: int, num_context_tokens: int) -> int:
    """Causal (query, key) pairs for ``q`` new tokens after ``c`` cached ones."""
    q = num_query_tokens
    return q * num_context_tokens + q * (q + 1) // 2


@dataclass(frozen=True)
class Roofline:
    """Forward-pass times of one model on one TP group."""

    hw: HardwareProfile
    model: ModelShape
    tp: int
    overheads: EngineOverheads

    def forward_s(self, batch: ForwardBatch) -> float:
        """Seconds for one forward pass; 0 for an empty batch."""
        if batch.num_tokens <= 0:
            return 0.0
        m, tp = self.model, self.tp
        bw, flops = self.hw.effective_bw, self.hw.effective_flops
        linear = max(
            m.body_params * m.dtype_bytes / tp / bw,
            2.0 * m.body_params * batch.num_tokens / tp / flops,
        )
        head = max(
            m.lm_head_params * m.dtype_bytes / tp / bw,
            2.0 * m.lm_head_params * batch.num_logit_tokens / tp / flops,
        )
        attn = max(
            batch.kv_read_tokens * m.kv_bytes_per_token / tp / bw,
            4.0 * m.num_layers * m.num_heads * m.head_dim * batch.attn_pairs / tp / flops,
        )
        launch = m.num_layers * self.overheads.per_layer_overhead_s
        return linear + head + attn + launch + self.allreduce_s(batch.num_tokens)

    def allreduce_s(self, num_tokens: int) -> float:
        """Two ring all-reduces per layer of ``num_tokens * hidden`` activations (tp > 1)."""
        if self.tp == 1:
            return 0.0
        m = self.model
        payload = num_tokens * m.hidden_size * m.dtype_bytes
        per_call = self.hw.allreduce_latency_s + (
            2.0 * (self.tp - 1) / self.tp * payload / self.hw.interconnect_bw_bytes_per_s
        )
        return 2 * m.num_layers * per_call


def prefill_batch(num_reqs: int, num_tokens_each: int) -> ForwardBatch:
    """``num_reqs`` fresh prefills of ``num_tokens_each`` tokens (logits for the last only)."""
    return ForwardBatch(
        num_tokens=num_reqs * num_tokens_each,
        num_logit_tokens=num_reqs,
        kv_read_tokens=num_reqs * num_tokens_each,
        attn_pairs=num_reqs * attn_pairs(num_tokens_each, 0),
    )


def decode_batch(num_reqs: int, context_tokens: int, gamma: int) -> ForwardBatch:
    """Target verification of ``gamma + 1`` tokens for ``num_reqs`` equal-context requests."""
    q = gamma + 1
    return ForwardBatch(
        num_tokens=num_reqs * q,
        num_logit_tokens=num_reqs * q,
        kv_read_tokens=num_reqs * (context_tokens + q),
        attn_pairs=num_reqs * attn_pairs(q, context_tokens),
    )


def draft_step_batch(num_reqs: int, context_tokens: int) -> ForwardBatch:
    """One draft proposal pass: one token per request."""
    return decode_batch(num_reqs, context_tokens, 0)
