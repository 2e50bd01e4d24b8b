"""Algorithm 1's block/bin counters of one batch-size key (lines 3, 19-25).

Per key B: block j (H = 2^(j-1)) holds floor(sqrt(H)) bins of floor(sqrt(H)) steps each;
a bin plays one locked arm. Pure Python, no imports beyond the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

BinListener = Callable[[int, int, int, bool, int], None]
"""Called at each bin start with (key, j_B, b_B, explored, gamma), and with explored
False when ``explore_bin_steps`` ends a probe and the bin turns to exploitation."""


class KeySchedule:
    """Block/bin counters of one batch-size key, and the arm its bin under way plays."""

    __slots__ = ("ahead", "arm", "b", "exploring", "j", "sqrt_h", "tau")

    def __init__(
        self, j: int = 1, b: int = 1, tau: int = 1, arm: int = 0, exploring: bool = False
    ) -> None:
        self.j, self.b, self.tau, self.arm = j, b, tau, arm
        self.exploring = exploring
        self.ahead: tuple[int, int, int | None] | None = None
        """(lo, hi, arm): Eq. 4's arm for the key ahead, locked for the bin under way while
        the batch ahead stays in that key's span ``lo..hi`` (the policy's ``_lock_ahead``)."""
        self.sqrt_h = math.sqrt(2 ** (j - 1))

    def close_bin(self) -> None:
        """tau passed sqrt(H): the next bin starts, and the next block when due. One round
        played is ``tau += 1`` and, when ``tau > sqrt_h``, this (inline in ``choose``)."""
        self.b += 1
        self.tau = 1
        if self.b > self.sqrt_h:
            self.j += 1
            self.sqrt_h = math.sqrt(2 ** (self.j - 1))
            self.b = 1

    def to_list(self) -> list[int | bool]:
        """[j, b, tau, arm, exploring]: what a snapshot of the policy's local state keeps."""
        return [self.j, self.b, self.tau, self.arm, self.exploring]

    @classmethod
    def from_list(cls, fields: Sequence[int]) -> KeySchedule:
        """:meth:`to_list`'s fields; a snapshot of 4 (no ``exploring``) loads as not
        exploring."""
        j, b, tau, arm, *rest = fields
        return cls(int(j), int(b), int(tau), int(arm), bool(rest and rest[0]))
