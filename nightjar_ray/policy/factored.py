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

``paired`` (``paired_acceptance``, the default) learns ``t`` from every drafted request's
acceptance depth instead: a request that accepted ``a`` of ``g`` drafts would have emitted
``min(a, g') + 1`` tokens at any ``g' <= g`` (the first ``g'`` drafts and their verdicts do
not depend on ``g``), so a step at gamma ``g`` is a sample of every shorter arm too, on the
same requests. Per depth ``j``, over the drafted requests of steps at gamma >= ``j``::

    q[key, j] = (reached j) / (reached j - 1)          shrunk toward q_all[j] by k
    t^[key, gamma] = 1 + sum_{h <= gamma} prod_{j <= h} q[key, j]

Rare longer arms are then compared with the arm a key plays on the same requests, not on
whichever requests a probe happened to meet, and ``t`` rises with gamma by construction.
An arm deeper than any depth observed keeps the estimate above. Stored as one more table
that merges exactly: ``reach_rate[key, j] = (requests at depth j - 1, q[key, j])``.
"""

from __future__ import annotations

from collections.abc import Mapping

from nightjar_ray.policy.stats import ArmTable, Cell

REQS_TABLE = "reqs_per_token"
REACH_TABLE = "reach_rate"

MAX_UNPOOLED = 8
"""Steps' depths kept to bring the pooled rows up to date, past which they are recomputed
from every key's instead (about the cost of adding this many steps' depths)."""

PriorRows = tuple[list[float], list[float], list[float], list[float]]
"""One key's requests-per-token counts and sums, then its depth rows (reached, tried)."""


class TokensPerRequestPrior:
    """Requests per token per (key, gamma), tokens per request over all keys, and (paired)
    drafted requests per acceptance depth per key and over all keys."""

    __slots__ = (
        "_depths",
        "_paired",
        "_pooled",
        "_prior",
        "_reqs",
        "_tokens",
        "_unpooled",
        "table",
    )

    def __init__(self, num_arms: int, prior_req_steps: float, paired: bool = True) -> None:
        if prior_req_steps < 0.0:
            raise ValueError(f"prior_req_steps must be >= 0, got {prior_req_steps}")
        self.table = ArmTable(num_arms)
        self._paired = paired
        self._prior = prior_req_steps
        self._depths: dict[int, tuple[list[float], list[float]]] = {}
        """key -> (requests that reached depth j, requests at depth j - 1 that tried it)."""
        self._tokens = [0.0] * num_arms
        self._reqs = [0.0] * num_arms
        """Tokens and requests per gamma over every key."""
        self._pooled: tuple[list[float], list[float]] | None = None
        """The depth rows over every key (``_pooled_depths``; ``None``: recompute)."""
        self._unpooled: list[tuple[int, ...]] = []
        """Depths folded since ``_pooled`` was last brought up to date: at most
        ``MAX_UNPOOLED`` (past that ``_pooled`` is dropped), and none while it is ``None``."""

    def rows(self, key: int) -> PriorRows:
        """The lists a step at ``key`` folds into (``fold``), created empty on first use.
        ``load`` replaces them: a caller that keeps them drops them at a load."""
        return (*self.table.rows(key), *self._depth_rows(key))

    def fold(
        self,
        rows: PriorRows,
        gamma: int,
        num_reqs: int,
        num_tokens: int,
        reaching: tuple[int, ...] = (),
    ) -> None:
        """Fold one step into ``rows`` (its key's ``rows``): ``num_reqs`` decoding requests
        emitted ``num_tokens``; ``reaching``: its drafted requests per acceptance depth
        (``StepResult.num_reqs_reaching``)."""
        counts, sums, reached, tried = rows
        counts[gamma] += num_tokens
        sums[gamma] += num_reqs
        self._tokens[gamma] += num_tokens
        self._reqs[gamma] += num_reqs
        if reaching and self._paired:
            if self._pooled is not None:
                # NOTE: kept for the pooled rows' next read, which adds them (the gate's
                # reads follow each step); past MAX_UNPOOLED that read recomputes them.
                unpooled = self._unpooled
                unpooled.append(reaching)
                if len(unpooled) > MAX_UNPOOLED:
                    self._pooled = None
                    unpooled.clear()
            depths = iter(reaching)
            below = next(depths)
            j = 1
            for n in depths:  # NOTE: sums only, inline: every observe
                reached[j] += n
                tried[j] += below
                below = n
                j += 1

    def _depth_rows(self, key: int) -> tuple[list[float], list[float]]:
        """The depth rows of ``key``, created empty on first use."""
        rows = self._depths.get(key)
        if rows is None:
            num_arms = self.table.num_arms
            # NOTE: integer zeros: request counts add faster as ints (every observe).
            rows = self._depths[key] = ([0] * num_arms, [0] * num_arms)
        return rows

    def _pooled_depths(self) -> tuple[list[float], list[float]]:
        """Every key's depth sums added up: kept, and brought up to date with the steps
        folded since (``_unpooled``), or recomputed from every key's rows."""
        pooled = self._pooled
        if pooled is not None:
            if self._unpooled:
                _add_depths(pooled, self._unpooled)
                self._unpooled.clear()
            return pooled
        self._unpooled.clear()
        if not self._depths:
            return [0.0] * self.table.num_arms, [0.0] * self.table.num_arms
        # NOTE: column sums in C. Every row is num_arms long; zip's strict= keyword (a
        # slower call path) would cost a fifth here.
        key_reached, key_tried = zip(*self._depths.values())  # noqa: B905
        reached: list[float] = list(map(sum, zip(*key_reached)))  # noqa: B905
        tried: list[float] = list(map(sum, zip(*key_tried)))  # noqa: B905
        pooled = self._pooled = (reached, tried)
        return pooled

    def export_depths(self) -> dict[tuple[int, int], Cell]:
        """The depths as a mergeable table: (key, j) -> (tried, share reached)."""
        return {
            (key, j): (float(tried[j]), reached[j] / tried[j])
            for key, (reached, tried) in sorted(self._depths.items())
            for j in range(1, len(tried))
            if tried[j] > 0.0
        }

    def load(
        self, reqs: Mapping[tuple[int, int], Cell], depths: Mapping[tuple[int, int], Cell]
    ) -> None:
        """Replace both tables and recompute the all-keys sums (``load_stats``)."""
        self.table.load(reqs)
        num_arms = self.table.num_arms
        self._tokens, self._reqs = [0.0] * num_arms, [0.0] * num_arms
        self._pooled = None
        self._unpooled.clear()
        for _key, gamma, tokens, reqs_per_token in self.table.cells():
            self._tokens[gamma] += tokens
            self._reqs[gamma] += tokens * reqs_per_token
        self._depths = {}
        for (key, j), (tried, rate) in depths.items():
            if not 0 < j < num_arms or tried <= 0.0:
                continue
            reached_row, tried_row = self._depth_rows(key)
            reached_row[j] += tried * rate
            tried_row[j] += tried

    def _paired_tokens(self, key: int) -> list[float]:
        """``t^[key, gamma]`` from acceptance depths (module docstring) for every gamma up
        to the deepest depth observed over all keys."""
        rows = self._depths.get(key)
        all_reached, all_tried = self._pooled_depths()
        k = self._prior
        out = [1.0]
        share = 1.0
        # NOTE: counts are ints until a load (faster sums); a count is never negative, so
        # truthiness tests "> 0" without an int/float comparison.
        for j in range(1, self.table.num_arms):
            if not all_tried[j]:
                break
            q = all_reached[j] / all_tried[j]
            if rows is not None and rows[1][j]:
                q = (rows[0][j] + k * q) / (rows[1][j] + k)
            share *= q
            out.append(out[-1] + share)
        return out

    def latency(self, key: int, token_weighted: list[float]) -> list[float]:
        """``l^`` per gamma of ``key`` from its token-weighted means (module docstring);
        an arm without a requests-per-token sample keeps its token-weighted mean."""
        counts = self.table.counts.get(key)
        if counts is None:
            return token_weighted
        paired = self._paired_tokens(key) if self._paired else [1.0]
        num_paired, all_tokens, k = len(paired), self._tokens, self._prior
        out = list(token_weighted)
        # NOTE: every row is num_arms long (strict= is a slower call): the gate's reads.
        rows = zip(counts, self.table.sums[key], self._reqs)  # noqa: B905
        for gamma, (tokens, reqs, all_reqs) in enumerate(rows):
            if reqs <= 0.0 or all_reqs <= 0.0:
                continue
            if 0 < gamma < num_paired:
                shrunk = paired[gamma]
            else:
                shrunk = (tokens + k * (all_tokens[gamma] / all_reqs)) / (reqs + k)
            out[gamma] = token_weighted[gamma] * tokens / (reqs * shrunk)
        return out


def _add_depths(pooled: tuple[list[float], list[float]], steps: list[tuple[int, ...]]) -> None:
    """Add ``steps``' acceptance depths (``StepResult.num_reqs_reaching`` each) to the
    pooled rows (reached, tried), as ``TokensPerRequestPrior.fold`` adds one to a key's."""
    reached, tried = pooled
    for reaching in steps:
        below = reaching[0]
        for j in range(1, len(reaching)):
            n = reaching[j]
            reached[j] += n
            tried[j] += below
            below = n
