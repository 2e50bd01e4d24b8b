"""What the nightjar policy knows per (batch-size key, gamma), and the rows Eq. (4) ranks.

:class:`ArmEstimates` owns the learned tables (``latency_per_token_s`` and, with the
``factored`` estimator, ``reqs_per_token``, ``reach_rate`` and ``batch_curve``'s
``steps_per_token``),
decides when an arm's estimate is trusted (*settled*), and builds the per-gamma row of
latency per token the policy ranks for a key (``ranked``)::

    key complete (every arm settled)    its own estimates, at the step's B (batch_curve)
    untried_arm_bound                   settled arms' estimates; each unsettled arm at a
                                        lower bound (smaller key's step time or ratio,
                                        unimodality)
    share_across_keys                   unsettled arms from the nearest complete key
    otherwise                           None: the key tries its arms first

Pure Python; every table merges exactly across replicas (``policy/stats.py``). How each
rule is argued: ``policy/nightjar.py``'s module docstring and docs/policies.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from nightjar_ray.policy.base import StepResult
from nightjar_ray.policy.batch_curve import STEPS_TABLE, BatchCurve
from nightjar_ray.policy.bucketing import BucketFn
from nightjar_ray.policy.factored import (
    REACH_TABLE,
    REQS_TABLE,
    PriorRows,
    TokensPerRequestPrior,
)
from nightjar_ray.policy.presets import NightjarParams
from nightjar_ray.policy.stats import ArmTable, Cell

LATENCY_TABLE = "latency_per_token_s"
_ANY_SAMPLE = math.ulp(0.0)
"""The smallest positive float: a count at least this is a sample."""

_Rows = tuple[
    int,
    list[float],
    list[float],
    list[float] | None,
    list[float] | None,
    PriorRows | None,
    float,
]


class ArmEstimates:
    """The learned statistics of one nightjar policy (module docstring)."""

    def __init__(self, config: NightjarParams, key: BucketFn) -> None:
        num_arms = config.gamma_max + 1
        self._key = key
        self._token_weighted = config.latency_estimator in ("token-weighted", "factored")
        self._prior: TokensPerRequestPrior | None = None
        if config.latency_estimator == "factored":
            self._prior = TokensPerRequestPrior(
                num_arms, config.tokens_prior_req_steps, config.paired_acceptance
            )
        self._curve = BatchCurve(num_arms) if config.batch_curve and self._prior else None
        self._share = config.share_across_keys
        self._bound = config.untried_arm_bound
        self._zero_bound_max_key = config.gamma_zero_bound_max_reqs
        self._min_tokens = config.min_arm_tokens_per_req
        self.table = ArmTable(num_arms)
        self.complete_keys: set[int] = set()
        """Keys whose every arm is settled."""
        self._keys: list[int] = []
        """``_sorted_keys``."""
        self._rows: dict[int, _Rows] = {}
        """batch size -> ``_new_rows`` of its key (one lookup per step, no key call;
        emptied by ``load``)."""

    def observe(self, result: StepResult) -> None:
        """Fold one validated step into every table."""
        num_reqs, gamma, num_tokens, duration_s, _, _, reaching = result
        rows = self._rows.get(num_reqs)
        if rows is None:
            rows = self._rows[num_reqs] = self._new_rows(self._key(num_reqs))
        key, counts, sums, step_counts, step_sums, prior_rows, settled_at = rows
        # NOTE: a key completes only when one of its arms settles, so only then is it checked
        # (an arm of a complete key is settled: counts only grow, and a load recomputes).
        check = counts[gamma] < settled_at
        # NOTE: token-weighted means fold l_t = d_t/n_t with weight n_t, i.e. sum(d)/sum(n);
        # counts then hold tokens, which merge exactly too. Folded in place: every step.
        if self._token_weighted:
            counts[gamma] += num_tokens
            sums[gamma] += duration_s
        else:
            counts[gamma] += 1.0
            sums[gamma] += duration_s / num_tokens
        prior = self._prior
        if prior is not None and prior_rows is not None:
            prior.fold(prior_rows, gamma, num_reqs, num_tokens, reaching)
            if step_counts is not None and step_sums is not None:
                step_counts[gamma] += num_tokens
                step_sums[gamma] += 1.0
        if check and self._all_settled(key):
            self.complete_keys.add(key)

    def _new_rows(self, key: int) -> _Rows:
        """``key`` and the lists a step there folds into: latency counts and sums, the
        batch curve's steps per token counts and sums, the prior's rows (``None`` without
        the curve, the prior); then the count that settles an arm of ``key``."""
        steps = self._curve.table.rows(key) if self._curve is not None else (None, None)
        prior = self._prior.rows(key) if self._prior is not None else None
        return (key, *self.table.rows(key), *steps, prior, self._settled_at(key))

    def settled(self, key: int, count: float) -> bool:
        """An arm's estimate is trusted: any sample (paper), or ``min_arm_tokens_per_req``
        tokens per request of ``key`` (the bucket's largest batch size)."""
        return count >= self._settled_at(key)

    def _settled_at(self, key: int) -> float:
        """The count from which an arm of ``key`` is settled; with no minimum, the smallest
        positive float (counts are never negative, so any sample settles it)."""
        return self._min_tokens * key if self._min_tokens > 0.0 else _ANY_SAMPLE

    def _all_settled(self, key: int) -> bool:
        return all(self.settled(key, n) for n in self.table.counts[key])

    def first_unsettled(self, key: int) -> int:
        """The smallest gamma ``key`` has not settled (it has one: the key is not complete)."""
        counts = self.table.counts_row(key)
        return next(g for g, n in enumerate(counts) if not self.settled(key, n))

    def best_settled(self, key: int) -> int:
        """The settled arm of ``key`` with the lowest estimate (0 when none is settled)."""
        counts = self.table.counts_row(key)
        settled = [g for g, n in enumerate(counts) if self.settled(key, n)]
        if not settled:
            return 0
        means = self.means(key)
        return min(settled, key=means.__getitem__)

    def ranked(
        self, key: int, num_reqs: int | None = None, *, own_zero: bool = False
    ) -> list[float] | None:
        """The row Eq. (4) ranks for ``key`` (module docstring; at ``num_reqs`` on the batch
        curve where given); ``None`` while the key must try an arm first, and, with
        ``own_zero``, while gamma 0 is priced by a bound, not settled (what the draft gate
        and elastic memory's gain read: gamma 0's own estimate)."""
        counts = self.table.counts_row(key)
        if own_zero and not self.settled(key, counts[0]):
            return None
        if key in self.complete_keys:
            return self.means(key) if num_reqs is None else self.means_at(key, num_reqs)
        if self._bound:
            return self._bounded_row(key, counts, num_reqs)
        if not self._share or not self.complete_keys:
            return None
        means = self.means(key)
        near = min(self.complete_keys, key=lambda k: (abs(k - key), k))
        prior = self.means(near)
        tried = [g for g, n in enumerate(counts) if n > 0.0]
        scale = sum(means[g] / prior[g] for g in tried) / len(tried) if tried else 1.0
        return [means[g] if counts[g] > 0.0 else scale * prior[g] for g in range(len(counts))]

    def ranked_at_or_below(
        self, key: int, above: int = 0, *, own_zero: bool = False
    ) -> list[float] | None:
        """The row of the largest key in ``(above, key]`` that ranks its arms (``None``:
        none does; ``own_zero`` as :meth:`ranked`). Walks down from ``key`` and stops at
        the first."""
        if key in self.complete_keys or self.table.counts.get(key) is not None:
            row = self.ranked(key, own_zero=own_zero)
            if row is not None:
                return row
        for k in sorted((k for k in self.table.counts if above < k < key), reverse=True):
            row = self.ranked(k, own_zero=own_zero)
            if row is not None:
                return row
        return None

    def _bounded_row(
        self, key: int, counts: list[float], num_reqs: int | None
    ) -> list[float] | None:
        """``untried_arm_bound``: settled arms keep their estimates; an unsettled arm is
        priced at the largest lower bound that applies: a smaller key's step time over B
        (:meth:`_monotone_bound`); the nearest settled arm below it times the two arms'
        ratio at the nearest smaller key that settled both (or a larger ratio a key
        between proves, :meth:`_smaller_ratio`); and, once a settled arm lost to a smaller
        one, that arm's estimate. ``None`` while some arm has no bound, and, above
        ``gamma_zero_bound_max_reqs``, until gamma 0 is settled."""
        zero_settled = self.settled(key, counts[0])
        if not zero_settled and key > self._zero_bound_max_key:
            return None
        row = list(self.means(key) if num_reqs is None else self.means_at(key, num_reqs))
        below: int | None = 0 if zero_settled else None
        best_below = row[0] if zero_settled else math.inf
        smaller: list[int] | None = None
        for gamma in range(len(counts)):
            if self.settled(key, counts[gamma]):
                below, best_below = gamma, min(best_below, row[gamma])
                continue
            if smaller is None:
                smaller = sorted((k for k in self.table.counts if k < key), reverse=True)
            bounds = [self._monotone_bound(smaller, gamma, key if num_reqs is None else num_reqs)]
            if below is not None:
                ratio = self._smaller_ratio(smaller, gamma, below)
                if ratio is not None:
                    bounds.append(row[below] * ratio)
                if row[below] > best_below:
                    bounds.append(row[below])
            known = [b for b in bounds if b is not None]
            if not known:
                return None
            row[gamma] = max(known)
        return row

    def _monotone_bound(self, smaller: list[int], gamma: int, num_reqs: int) -> float | None:
        """A lower bound on l~[B, gamma] at B = ``num_reqs`` from the nearest smaller key
        that settled ``gamma``: its mean step time (step time does not fall as B grows) over
        B requests at its tokens per request, ``l~[k, gamma] * B~ / B``."""
        curve, prior = self._curve, self._prior
        if curve is None or prior is None:
            return None
        for k in smaller:
            if not self.settled(k, self.table.counts[k][gamma]):
                continue
            points = curve.points(k, self.table, prior.table)
            point = None if points is None else points[gamma]
            if point is None:
                continue
            return self.means(k)[gamma] * point[0] / num_reqs
        return None

    def _smaller_ratio(self, smaller: list[int], gamma: int, below: int) -> float | None:
        """A lower bound on l~[key, gamma] / l~[key, below] from the smaller keys (``smaller``,
        largest first): the two arms' ratio at the largest that settled both, raised where
        a key between lower-bounds it by unimodality (it settled ``below`` and an arm
        between the two that lost to a smaller one, so ``gamma``, further out, costs at
        least that arm). ``None`` where no smaller key settled both."""
        bound = 0.0
        for k in smaller:
            counts = self.table.counts[k]
            if not self.settled(k, counts[below]):
                continue
            means = self.means(k)
            if means[below] <= 0.0:
                return None
            if self.settled(k, counts[gamma]):
                return max(bound, means[gamma] / means[below])
            past = self._past_mode(k, counts, means, below, gamma)
            if past is not None:
                bound = max(bound, means[past] / means[below])
        return None

    def _past_mode(
        self, key: int, counts: list[float], means: list[float], below: int, gamma: int
    ) -> int | None:
        """The largest settled arm of ``key`` strictly between ``below`` and ``gamma`` that
        costs more than a settled smaller arm (past the mode: every longer arm costs at
        least it), or ``None``."""
        best: float | None = None
        found: int | None = None
        for g in range(gamma):
            if not self.settled(key, counts[g]):
                continue
            if g > below and best is not None and means[g] > best:
                found = g
            best = means[g] if best is None else min(best, means[g])
        return found

    def means_at(self, key: int, num_reqs: int) -> list[float]:
        """l~[B, gamma] per gamma at B = ``num_reqs`` (``batch_curve``; else the key's)."""
        means = self.means(key)
        curve, prior = self._curve, self._prior
        if curve is None or prior is None:
            return means
        scales = curve.scales(key, num_reqs, self._sorted_keys(), self.table, prior.table)
        return [m * scale for m, scale in zip(means, scales)]  # noqa: B905 (num_arms each)

    def _sorted_keys(self) -> list[int]:
        """Every key of the latency table, ascending (kept until a key is added: keys are
        only ever added, except by ``load``, which empties this)."""
        keys = self._keys
        if len(keys) != len(self.table.counts):
            keys = self._keys = sorted(self.table.counts)
        return keys

    def means(self, key: int) -> list[float]:
        """l~[key, gamma] per gamma: the table's means, or ``factored``'s from them."""
        means = self.table.mean_row(key)
        return means if self._prior is None else self._prior.latency(key, means)

    def estimate(self, num_reqs: int, gamma: int) -> float | None:
        """Current l~[B, gamma] at the key of ``num_reqs`` (s per token), ``None`` if unseen."""
        key = self._key(num_reqs)
        return None if self.table.get(key, gamma) is None else self.means(key)[gamma]

    def estimate_at_or_below(self, num_reqs: int, gamma: int) -> float | None:
        """l~[B, gamma] at the key of ``num_reqs`` or, unseen there, at the largest
        smaller key that has seen ``gamma`` (``None``: no key up to it has)."""
        key = self._key(num_reqs)
        for k in reversed(self._sorted_keys()):
            if k <= key and self.table.get(k, gamma) is not None:
                return self.means(k)[gamma]
        return None

    def export(self) -> dict[str, dict[tuple[int, int], Cell]]:
        """Every table by name (what ``PolicyStats`` carries)."""
        tables = {LATENCY_TABLE: self.table.export()}
        if self._prior is not None:
            tables[REQS_TABLE] = self._prior.table.export()
            tables[REACH_TABLE] = self._prior.export_depths()
        if self._curve is not None:
            tables[STEPS_TABLE] = self._curve.table.export()
        return tables

    def load(self, tables: Mapping[str, Mapping[tuple[int, int], Cell]]) -> None:
        """Replace every table (a missing one loads empty) and recompute complete keys."""
        self.table.load(tables.get(LATENCY_TABLE, {}))
        self._rows, self._keys = {}, []
        if self._prior is not None:
            self._prior.load(tables.get(REQS_TABLE, {}), tables.get(REACH_TABLE, {}))
        if self._curve is not None:
            self._curve.table.load(tables.get(STEPS_TABLE, {}))
        self.complete_keys = {k for k in self.table.counts if self._all_settled(k)}
