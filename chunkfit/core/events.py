"""Event markers against window scores: the events covered by a positive window, and false alarms.

An event at sample e is covered when a positive window starting at s holds it (s <= e < s + window).
A detection (a run of positive windows, chunkfit.core.detect) holding no event is a false alarm.
"""

from __future__ import annotations

import numpy as np

from ..store import Store
from .detect import Detection, RunMerger, is_positive


class EventLevel:
    """Event coverage (markers inside at least one positive window) and false alarms."""

    def __init__(self, events: np.ndarray, window: int, stride: int, threshold: float) -> None:
        self.events = events
        self.window = window
        self.covered = np.zeros(events.size, dtype=bool)
        self.merger = RunMerger(window, stride, threshold)
        self.threshold = threshold
        self.detections = 0
        self.false_alarms = 0

    def update(self, starts: np.ndarray, segment: int, score: np.ndarray) -> None:
        """The windows starting at ``starts`` (in order, inside segment or range ``segment``) scored
        ``score``."""
        pos = starts[is_positive(score, self.threshold)]
        if pos.size and self.events.size:
            lo = np.searchsorted(self.events, pos[0], "left")
            hi = np.searchsorted(self.events, pos[-1] + self.window, "left")
            ev = self.events[lo:hi]
            # a positive start s covers event e when s <= e < s + window
            n_in = np.searchsorted(pos, ev, "right") - np.searchsorted(
                pos, ev - self.window + 1, "left"
            )
            self.covered[lo:hi] |= n_in > 0
        self._count(self.merger.push(starts, score, segment))

    def finish(self) -> None:
        self._count(self.merger.flush())

    def _count(self, detections: list[Detection]) -> None:
        for d in detections:
            self.detections += 1
            i = np.searchsorted(self.events, d.start, "left")
            if i >= self.events.size or self.events[i] >= d.end:
                self.false_alarms += 1


def events_in(store: Store, ranges: np.ndarray) -> np.ndarray:
    """The store's event markers that fall inside ``ranges`` (sorted, as the store keeps them)."""
    ev = store.events
    keep = np.zeros(ev.size, dtype=bool)
    for a, b in ranges.tolist():
        keep |= (ev >= a) & (ev < b)
    return ev[keep]
