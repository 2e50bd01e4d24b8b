"""Nightjar: Algorithm 1 of the paper (§4.2) with the Eq. (4) switch penalty.

Per batch-size key B the policy keeps (j_B, H_B, b_B, tau_B)::

    block j (H = 2^(j-1))  |-- bin 1 --|-- bin 2 --| ... |-- bin K --|    K = floor(sqrt(H))
    bin                     tau = 1 .. floor(sqrt(H)) steps, one locked arm

At a bin start (tau_B = 1) the bin explores with probability 1/b_B (uniform
arm in {0..Gamma_max}) and otherwise exploits Eq. (4)::

    gamma* = argmin_gamma  l~[B, gamma]
                           + I(gamma_prev = 0 and gamma > 0) * C_switch(L_max, B) / gamma

where l~ is the incremental mean of observed latency per token (duration /
emitted tokens), not the inverse of mean goodput, and gamma_prev is the gamma
of the previous step (any batch size). ``latency_estimator="token-weighted"``
(beyond the paper) uses sum(duration)/sum(tokens) instead: with one request a
step emits 1..gamma+1 tokens, and the mean of d/n then overrates high gamma
(Jensen: E[d/n] > d/E[n]). ``latency_estimator="factored"``
(beyond the paper, the default) is that estimate with each key's tokens per request
shrunk toward their mean over every batch size (``policy/factored.py``): acceptance does
not depend on B, so one unlucky draw at a key cannot retire an arm. A bin ends when
tau_B > sqrt(H_B), a block when b_B > sqrt(H_B); then j_B += 1 and H_B = 2^(j_B - 1).

``exploration="local"`` (beyond the paper) draws an exploration bin's arm from the
exploited gamma* and its neighbours {gamma*-1, gamma*, gamma*+1} once every arm of the key
has a sample (goodput over gamma is unimodal for geometric acceptance, so when gamma* is
not the best arm a neighbour is better); until then probes stay uniform.

``explore_bin_steps`` (beyond the paper) ends an exploration bin's probe after that many
steps and exploits for the rest of the bin: the bin/block counters are unchanged, and a
probe late in a key's schedule (bins of sqrt(H) = 32, 64, ... steps) costs a few steps,
not a bin.

Arms never observed (exploitation's open question): in the paper preset an
exploitation bin plays the smallest gamma that has no observation yet under this
key before trusting any estimate (optimistic initialization, as UCB plays every
arm once), so a batch size never seen before costs at most Gamma_max + 1 such bins.
``min_arm_tokens_per_req`` (beyond the paper, 1 by default) counts an arm as tried only
after that many tokens per request of the key (its largest batch size), so one step that
rejected every draft token cannot retire an arm that local probes would never reach.
``share_across_keys`` (beyond the paper, off by default) ranks a key's untried arms
from the nearest key that has tried every arm instead: its estimates, rescaled by
the mean ratio of this key's tried arms to the neighbour's, fill the gaps, and
Eq. (4) runs over the filled row; only an untried arm that then ranks best is
played. Step time is smooth in B, so the neighbour's ranking is a sound prior;
this key's own samples replace it arm by arm::

    key 8:   [ m0   m1   .    .    .  ]   tried: 0, 1
    key 16:  [ n0   n1   n2   n3   n4 ]   nearest complete key
    ranked:  [ m0   m1   r*n2 r*n3 r*n4]  r = mean(m0/n0, m1/n1)

``batch_curve`` (beyond the paper, the default) ranks a key's arms at the step's exact
batch size: each (key, gamma) keeps its mean step time at its mean B, and the estimate at
B interpolates step time between neighbouring keys (``policy/batch_curve.py``), so a key
whose best arm changes inside its range plays each side's arm.

``untried_arm_bound`` (beyond the paper, the default): an arm the key has not settled is
priced by a lower bound instead of being played to find out, the largest of: the nearest
smaller key's mean step time for it over B requests' tokens (step time does not fall as
B grows); the nearest settled arm below it times the two arms' ratio at the nearest
smaller key that settled both (speculation's relative cost does not fall as B grows),
raised to the ratio of a longer arm that lost to a shorter one at a key in between
(unimodality there: the untried arm, further out, costs at least that one); and, once a
settled arm lost to a smaller one at this key, that arm's estimate (latency per token is
unimodal in gamma). Eq. (4) runs over the filled row, so an untried arm plays only where
even its optimistic price ranks best. Gamma 0 is priced so (by the step-time bound) only
at keys up to ``gamma_zero_bound_max_reqs``: a new key there plays the arm the smaller
key's step times rank first and tries gamma 0 only where its bound still ranks best; a
larger key tries gamma 0 first, since the draft gate and elastic memory's gain read a key
only once its gamma 0 is its own estimate, not a bound, and the gain decides a whole
surge's draft memory. An arm no bound prices is tried in order, as exploration: for
``explore_bin_steps`` steps of a bin, and while requests wait only in exploration bins
(an exploitation bin plays the best settled arm).

``draft_gate`` (beyond the paper, the default) exposes the ranked row through
``latency_estimates`` so the driver's draft gate (``driver/draft_gate.py``) can run
gamma = 0 in a step whose speculation cannot pay for the draft work it owes
(``draft_gate_scope="request"``, the default: the draft runs only over the requests it
pays for); the bandit's schedule is not touched by it.

``queue_aware`` (beyond the paper, the default). While requests wait, mean E2E is set by
how fast outstanding work drains at the batch size the queue will produce, B' (the
driver's ``batch_ahead``: B plus the queued requests, capped by seats and KV). Draining R
outstanding tokens at gamma takes about ``R * l~[B', gamma]`` plus the switch cost, so
every step with B' in a larger key than B plays Eq. (4) over the row of key(B') (or of
the largest larger key that ranks every arm; none: the bin's arm stands), chosen at the
bin's start and again whenever key(B') changes, like the bin's own arm. The bins keep
counting at key(B). Exploration is paid for by the waiting requests, so an exploration
bin that starts while requests wait probes only down: the exploited arm or the one below
(a shorter step), never a longer one; it still probes, since the largest keys exist only
under queueing and would otherwise keep their first estimates. With nothing waiting this
is Algorithm 1 with Eq. (4) at B::

    B' = None:  gamma = bin arm at key(B)             (explore w.p. 1/b, else Eq. 4)
    B' > B:     gamma = argmin_g l~[key(B'), g] + switch penalty    (decision mode "queue")

NOTE: the schedule counters advance in ``choose`` (when the arm is played),
the estimates in ``observe``. In a sequential loop this is Algorithm 1
exactly; with one step in flight (async scheduling) the counters still follow
the steps actually played.

Each parameter's default and when to change it: docs/policies.md, "Configuration
(`policy_params`)".
"""

from __future__ import annotations

import random
from typing import Any

from nightjar_ray.policy.base import Policy, StepResult, validate_result
from nightjar_ray.policy.bucketing import bucket_fn, bucket_span_fn
from nightjar_ray.policy.estimates import LATENCY_TABLE, ArmEstimates
from nightjar_ray.policy.presets import NightjarParams
from nightjar_ray.policy.schedule import BinListener, KeySchedule
from nightjar_ray.policy.stats import PolicyStats
from nightjar_ray.policy.switch_cost import SwitchCostTable

__all__ = ["LATENCY_TABLE", "NightjarPaperPolicy", "NightjarPolicy"]


class NightjarPolicy(Policy):
    """The paper's bandit; see module docstring."""

    name = "nightjar"

    def __init__(
        self,
        config: NightjarParams,
        rng: random.Random,
        switch_cost: SwitchCostTable | None = None,
    ) -> None:
        self.config = config
        self._rng = rng
        self._gamma_max = config.gamma_max
        self._key = bucket_fn(config.bucketing)
        self._span = bucket_span_fn(config.bucketing)
        self._switch_cost = switch_cost or SwitchCostTable.constant(config.switch_cost_ms / 1e3)
        self._weight = config.switch_cost_weight
        self._estimates = ArmEstimates(config, self._key)
        self._local = config.exploration == "local"
        self._explore_steps = config.explore_bin_steps
        self._bound = config.untried_arm_bound
        self._gate = config.draft_gate
        self._queue_aware = config.queue_aware
        self._schedules: dict[int, KeySchedule] = {}
        self._by_reqs: dict[int, tuple[int, KeySchedule]] = {}
        """batch size -> (its key, the key's schedule): one lookup per ``choose``."""
        self._prev_gamma = 0
        self.bin_listener: BinListener | None = None
        self.num_explore_bins = 0
        self.num_exploit_bins = 0
        self.num_queued_explore_bins = 0

    @property
    def gamma_max(self) -> int:
        return self._gamma_max

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        entry = self._by_reqs.get(num_reqs)
        if entry is None or max_skip_tokens < 0:
            entry = self._schedule_of(num_reqs, max_skip_tokens)
        key, sched = entry
        reqs_ahead = num_reqs_ahead or 0
        queued = reqs_ahead > num_reqs and self._queue_aware
        tau = sched.tau
        if tau == 1:  # a bin starts
            sched.arm = self._start_bin(key, sched, num_reqs, max_skip_tokens, queued)
        elif sched.exploring and self._probe_done(sched):
            sched.arm = self._end_probe(key, sched, num_reqs, max_skip_tokens)
        gamma = sched.arm
        exploring = self.last_explored = sched.exploring
        if queued and not exploring:
            # NOTE: the bin's lock of :meth:`_lock_ahead` checked inline (every queued step).
            locked = sched.ahead
            if tau == 1 or locked is None or not locked[0] <= reqs_ahead <= locked[1]:
                locked = self._lock_ahead(key, sched, num_reqs, reqs_ahead, max_skip_tokens)
            ahead = locked[2]
            self.last_queued = ahead is not None
            if ahead is not None:
                gamma = ahead
        else:
            self.last_queued = False
        tau += 1
        if tau > sched.sqrt_h:
            sched.close_bin()
        else:
            sched.tau = tau
        self._prev_gamma = gamma
        return gamma

    def _schedule_of(self, num_reqs: int, max_skip_tokens: int) -> tuple[int, KeySchedule]:
        """The key of ``num_reqs`` and its schedule (created on first use), remembered per
        batch size; refuses arguments no step can have."""
        if num_reqs < 1 or max_skip_tokens < 0:
            raise ValueError(
                f"need num_reqs >= 1 and max_skip_tokens >= 0, got {num_reqs}, {max_skip_tokens}"
            )
        key = self._key(num_reqs)
        sched = self._schedules.get(key)
        if sched is None:
            sched = self._schedules[key] = KeySchedule()
        entry = self._by_reqs[num_reqs] = (key, sched)
        return entry

    def _start_bin(
        self, key: int, sched: KeySchedule, num_reqs: int, skip: int, queued: bool
    ) -> int:
        """Lines 8-15: explore with probability 1/b_B, else exploit Eq. (4). While
        requests wait (``queued``) a probe only looks down (:meth:`_explore_arm`)."""
        explore = self._rng.random() < 1.0 / sched.b
        sched.exploring = explore
        if explore:
            self.num_explore_bins += 1
            self.num_queued_explore_bins += queued
            gamma = self._explore_arm(key, num_reqs, skip, queued)
        else:
            self.num_exploit_bins += 1
            gamma = self.exploit(key, num_reqs, skip)
            if self._bound and gamma > 0 and self._estimates.ranked(key) is None:
                gamma = self._trial(key, sched, gamma, queued)
        if self.bin_listener is not None:
            self.bin_listener(key, sched.j, sched.b, explore, gamma)
        return gamma

    def _trial(self, key: int, sched: KeySchedule, gamma: int, queued: bool) -> int:
        """``untried_arm_bound``: trying an arm no bound prices is exploration: it plays
        for a probe's ``explore_bin_steps`` (then the bin plays the best settled arm), and
        an exploitation bin does not try it while requests wait, who would pay for its
        steps (the best settled arm plays). Exploration bins still try it (at their rate,
        1/b): keys that exist only under queueing must learn too."""
        if queued:
            return self._estimates.best_settled(key)
        sched.exploring = True
        return gamma

    def _lock_ahead(
        self, key: int, sched: KeySchedule, num_reqs: int, num_reqs_ahead: int, skip: int
    ) -> tuple[int, int, int | None]:
        """:meth:`_exploit_ahead`, locked for the rest of the bin of ``key`` as the bin's
        own arm is (``choose`` recomputes it at a bin start or when the key ahead changes,
        that is when the batch ahead leaves the locked key's span)."""
        key_ahead = self._key(num_reqs_ahead)
        lo, hi = self._span(key_ahead)
        arm = self._exploit_ahead(key, key_ahead, num_reqs, num_reqs_ahead, skip)
        locked = sched.ahead = (lo, hi, arm)
        return locked

    def _exploit_ahead(
        self, key: int, key_ahead: int, num_reqs: int, num_reqs_ahead: int, max_skip_tokens: int
    ) -> int | None:
        """Eq. (4) at the batch size the queue will produce (``num_reqs_ahead``, of key
        ``key_ahead``): over the row of its key, or of the largest key between this one and
        it that ranks its arms; ``None`` when no such key is larger than this one (the
        bin's own arm stands)."""
        if key_ahead <= key:
            return None
        means = self._estimates.ranked(key_ahead, num_reqs_ahead)
        if means is None:
            means = self._estimates.ranked_at_or_below(key_ahead, above=key)
            if means is None:
                return None
        return self._eq4(means, num_reqs, max_skip_tokens)

    def _probe_done(self, sched: KeySchedule) -> bool:
        """An exploration bin has played its probe for ``explore_bin_steps`` steps."""
        return self._explore_steps is not None and sched.tau > self._explore_steps

    def _end_probe(self, key: int, sched: KeySchedule, num_reqs: int, skip: int) -> int:
        """The rest of a capped exploration bin exploits (counted as neither bin kind)."""
        sched.exploring = False
        gamma = self.exploit(key, num_reqs, skip)
        if self._bound and self._estimates.ranked(key) is None:
            gamma = self._estimates.best_settled(key)
        if self.bin_listener is not None:
            self.bin_listener(key, sched.j, sched.b, False, gamma)
        return gamma

    def _explore_arm(
        self, key: int, num_reqs: int, max_skip_tokens: int, queued: bool = False
    ) -> int:
        """Line 11: a uniform arm; ``local`` draws from the exploited arm +-1 instead once
        every arm of ``key`` has a sample (before that, probes stay uniform). While
        requests wait, a probe of a key that ranks its arms draws from the exploited arm
        and the one below: a shorter step, whose time the waiting requests pay less."""
        lo, hi = 0, self._gamma_max
        ranked = self._estimates.ranked(key) is not None
        if self._bound and not ranked:
            return self._estimates.first_unsettled(key)
        if (self._local or queued) and ranked:
            best = self.exploit(key, num_reqs, max_skip_tokens)
            lo, hi = max(0, best - 1), best if queued else min(self._gamma_max, best + 1)
        return self._rng.randint(lo, hi)

    def exploit(self, key: int, num_reqs: int, max_skip_tokens: int) -> int:
        """Eq. (4) over the arms of ``key`` at ``num_reqs``; untried arms per the module doc."""
        means = self._estimates.ranked(key, num_reqs)
        if means is None:
            return self._estimates.first_unsettled(key)
        return self._eq4(means, num_reqs, max_skip_tokens)

    def _eq4(self, means: list[float], num_reqs: int, max_skip_tokens: int) -> int:
        """argmin over gamma of ``means[gamma]`` plus the switch penalty of Eq. (4)."""
        penalty = 0.0
        if self._prev_gamma == 0 and self._weight > 0.0:
            penalty = self._weight * self._switch_cost.cost_s_at(max_skip_tokens, num_reqs)
        best_gamma, best_loss = 0, means[0]
        for gamma in range(1, self._gamma_max + 1):
            loss = means[gamma] + penalty / gamma
            if loss < best_loss:
                best_gamma, best_loss = gamma, loss
        return best_gamma

    @property
    def draft_gate(self) -> bool:
        return self._gate

    @property
    def probe_steps(self) -> int | None:
        return self._explore_steps

    @property
    def gates_per_request(self) -> bool:
        return self._gate and self.config.draft_gate_scope == "request"

    def latency_estimates(self, num_reqs: int) -> list[float] | None:
        """The row Eq. (4) ranks for ``num_reqs`` once its key has gamma 0's own estimate
        (``None`` before, and while the key cannot rank every arm): what the draft gate
        reads."""
        if num_reqs < 1:
            return None
        return self._estimates.ranked(self._key(num_reqs), num_reqs, own_zero=True)

    def ranked_row(self, num_reqs: int) -> list[float] | None:
        """The row Eq. (4) ranks for ``num_reqs``, gamma 0 at its bound where the key has
        not settled it (``None``: the key cannot rank every arm yet)."""
        return None if num_reqs < 1 else self._estimates.ranked(self._key(num_reqs), num_reqs)

    def latency_at_zero_s(self, num_reqs: int) -> float | None:
        """l~[B, 0] at the key of ``num_reqs`` once gamma = 0 has a sample there; before
        that, at the largest smaller key that has one (time per token falls as B grows,
        so a smaller batch's bounds this one's from above, as the gate's best case needs);
        ``None`` while no key up to it has."""
        return None if num_reqs < 1 else self._estimates.estimate_at_or_below(num_reqs, 0)

    def speculation_gain(self, num_reqs: int, best_case: float) -> float | None:
        """``l~[B, 0] / min_gamma l~[B, gamma]`` at the key of ``num_reqs`` once it ranks
        its arms (bounded rows included); before that, at the largest smaller key that
        does (speculation gains less as B grows, so a smaller batch's gain bounds this
        one's); ``best_case`` while no key at or below it ranks (no evidence either way:
        the draft is worth what it could do at best). ``None`` with
        ``price_draft_memory`` off (the paper preset)."""
        if not self.config.price_draft_memory:
            return None
        means = self._estimates.ranked_at_or_below(self._key(max(num_reqs, 1)), own_zero=True)
        return best_case if means is None else means[0] / min(means)

    def observe(self, result: StepResult) -> None:
        validate_result(result, self._gamma_max)
        self._estimates.observe(result)

    def estimate(self, num_reqs: int, gamma: int) -> float | None:
        """Current l~[B, gamma] (seconds per token) or ``None`` if unobserved."""
        return self._estimates.estimate(num_reqs, gamma)

    def export_stats(self) -> PolicyStats:
        return PolicyStats(self.name, self._estimates.export())

    def load_stats(self, stats: PolicyStats) -> None:
        self.check_stats_owner(stats)
        self._estimates.load(stats.tables)

    def local_state(self) -> dict[str, Any]:
        return {
            "prev_gamma": self._prev_gamma,
            "schedules": [[k, *s.to_list()] for k, s in sorted(self._schedules.items())],
        }

    def load_local_state(self, state: dict[str, Any]) -> None:
        self._prev_gamma = int(state.get("prev_gamma", 0))
        self._by_reqs = {}
        self._schedules = {
            int(k): KeySchedule.from_list(fields) for k, *fields in state.get("schedules", [])
        }


class NightjarPaperPolicy(NightjarPolicy):
    """The paper's exact Algorithm 1 (preset ``nightjar-paper`` in ``policy/presets.py``).

    Its own name keeps its statistics apart: step-mean and token-weighted tables do not
    merge into one mean.
    """

    name = "nightjar-paper"
