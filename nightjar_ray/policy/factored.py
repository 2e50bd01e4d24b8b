"""The ``factored`` latency estimator: step time per key, tokens per request shared.

A step's latency per token is its time over the tokens it emits, and the two halves
behave differently (pure Python, no vllm/ray import)::

    l[B, gamma] = d[B, gamma] / (B * t[gamma])

    d: step time        depends on B and gamma; nearly the same step to step
    t: tokens a request emits per step at gamma (accepted drafts + 1); depends on what
       the draft guesses right, not on B, and varies a lot from step to step

The token-weighted estimator (``sum(d) / sum(n)`` per key) learns both halves per
batch-size key, so an arm a key tried once with an unlucky acceptance draw keeps that
draw until the key plays the arm again, which local probes far from it never do.
``factored`` keeps ``d`` per key and shrinks each key's ``t`` toward the mean over every
key, which a few hundred steps pin down::

    t^[key, gamma] = (tokens[key, gamma] + k * t_all[gamma]) / (req_steps[key, gamma] + k)
    l^[key, gamma] = d[key, gamma] / t^[key, gamma]          d: sum(step s) / sum(B)

``k`` (``tokens_prior_req_steps``) is the prior's weight in request-steps: at B=1 a key
trusts its own acceptance after about ``k`` steps, at B >= ``k`` after one, so a key's
own acceptance dominates where it has the evidence (a small batch is a few requests,
whose acceptance may differ from the mean). With ``k`` = 0 this is the token-weighted
estimator exactly. Units: ``t`` in tokens per request-step, ``l`` and ``l^`` in seconds
per token.

Stored as the token-weighted table (``sum(d)/sum(n)``, counts in tokens, the same table
and counts as ``token-weighted``) plus one table of requests per token with those counts;
both merge exactly across replicas, and ``t_all`` is derived from them::

    latency_per_token_s[key, gamma] = (tokens, sum(d) / tokens)
    reqs_per_token[key, gamma]      = (tokens, sum(B) / tokens)
"""

from __future__ import annotations

from nightjar_ray.policy.stats import ArmTable

REQS_TABLE = "reqs_per_token"


class TokensPerRequestPrior:
    """Requests per token per (key, gamma), and tokens per request over all keys."""

    __slots__ = ("_prior", "_reqs", "_tokens", "table")

    def __init__(self, num_arms: int, prior_req_steps: float) -> None:
        if prior_req_steps < 0.0:
            raise ValueError(f"prior_req_steps must be >= 0, got {prior_req_steps}")
        self.table = ArmTable(num_arms)
        self._prior = prior_req_steps
        self._tokens = [0.0] * num_arms
        self._reqs = [0.0] * num_arms

    def update(self, key: int, gamma: int, num_reqs: int, num_tokens: int) -> None:
        """Fold one step (``num_reqs`` decoding requests emitted ``num_tokens``)."""
        table = self.table
        counts = table.counts.get(key)
        if counts is None:
            table.update(key, gamma, num_reqs / num_tokens, float(num_tokens))
        else:  # NOTE: ArmTable.update inlined: the hot path of every observe
            means = table.means[key]
            n = counts[gamma] + num_tokens
            counts[gamma] = n
            means[gamma] += (num_reqs / num_tokens - means[gamma]) * (num_tokens / n)
        self._tokens[gamma] += num_tokens
        self._reqs[gamma] += num_reqs

    def reload(self) -> None:
        """Recompute the all-keys sums after ``table`` was replaced (``load_stats``)."""
        self._tokens = [0.0] * self.table.num_arms
        self._reqs = [0.0] * self.table.num_arms
        for _key, gamma, tokens, reqs_per_token in self.table.cells():
            self._tokens[gamma] += tokens
            self._reqs[gamma] += tokens * reqs_per_token

    def latency(self, key: int, token_weighted: list[float]) -> list[float]:
        """``l^`` per gamma of ``key`` from its token-weighted means (module docstring);
        an arm without a requests-per-token sample keeps its token-weighted mean."""
        counts = self.table.counts.get(key)
        if counts is None:
            return token_weighted
        ratios = self.table.means[key]
        out = list(token_weighted)
        k = self._prior
        for gamma, (tokens, ratio) in enumerate(zip(counts, ratios, strict=True)):
            reqs = tokens * ratio
            if reqs <= 0.0 or self._reqs[gamma] <= 0.0:
                continue
            all_keys = self._tokens[gamma] / self._reqs[gamma]
            shrunk = (tokens + k * all_keys) / (reqs + k)
            out[gamma] = token_weighted[gamma] * tokens / (reqs * shrunk)
        return out
