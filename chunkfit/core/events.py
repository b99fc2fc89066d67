"""Event markers against window scores: detections matched one to one to the markers.

Window scores become detections (runs of positive windows, chunkfit.core.detect); each detection
stands at its peak (``Detection.peak``) and spans its windows. chunkfit.core.matching pairs them
with the markers within a tolerance, each at most once, so one detection spanning the record finds
one event, not all of them. Every event figure evaluate, the threshold choice and the epoch logs
report comes from ``EventScorer`` and ``event_figures``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..store import Store
from .detect import Detection, RunMerger
from .matching import EventMatch, match_events


def tolerance_samples(tolerance: float | None, rate: float | None, window: int) -> int:
    """``--tolerance`` in samples: seconds times the store's rate (samples where the store has no
    rate); None gives half a window, the distance from a window's centre to its edge."""
    if tolerance is None:
        return window // 2
    return int(round(tolerance * rate)) if rate else int(round(tolerance))


class EventScorer:
    """Streams the scored windows of one range in start order into detections at ``threshold``,
    then matches them to ``markers`` (sorted samples) within ``tolerance`` samples. ``region`` is
    the part of a window whose marker makes it positive (the label rule's, config.event_span)."""

    def __init__(
        self,
        markers: np.ndarray,
        window: int,
        stride: int,
        threshold: float,
        tolerance: int,
        match: str = "peak",
        region: tuple[int, int] | None = None,
    ) -> None:
        self.markers = markers
        self.window, self.tolerance, self.match = window, tolerance, match
        self.threshold = threshold
        self.merger = RunMerger(window, stride, threshold, region=region)
        self.peaks: list[int] = []
        self.spans: list[tuple[int, int]] = []

    def update(self, starts: np.ndarray, segment: int, score: np.ndarray) -> None:
        """The windows starting at ``starts`` (in order, inside segment or range ``segment``) scored
        ``score``."""
        self._add(self.merger.push(starts, score, segment))

    def finish(self) -> EventMatch:
        """The one-to-one matching of every detection with the markers."""
        self._add(self.merger.flush())
        peaks = np.array(self.peaks, dtype=np.int64)
        if self.match == "span":
            spans = np.array(self.spans, dtype=np.int64).reshape(-1, 2)
            return match_events(self.markers, peaks, self.tolerance, lo=spans[:, 0], hi=spans[:, 1])
        return match_events(self.markers, peaks, self.tolerance)

    def _add(self, detections: list[Detection]) -> None:
        for d in detections:
            self.peaks.append(d.peak)
            self.spans.append((d.start, d.end - 1))


def event_figures(
    match: EventMatch, rate: float | None, hours: float | None, tolerance: int, how: str
) -> dict[str, Any]:
    """The event figures under the names evaluate, run.json and ``--fail-under`` use.

    ``events`` markers, ``detections``, ``event_found`` (markers paired with a detection),
    ``false_alarms`` (detections paired with none) and per hour of signal scored,
    ``event_precision`` (found / detections), ``event_recall`` (found / events), ``event_f1``,
    and the median and 95th-percentile absolute time error of the paired peaks in seconds. Per
    hour and seconds are None on a store without a sample rate.
    """
    s = match.summary(rate or 1.0, hours if hours else math.nan)
    return {
        "events": match.n_markers,
        "detections": match.n_detections,
        "event_found": match.found,
        "false_alarms": match.false_alarms,
        "false_alarms_per_hour": s["false_alarms_per_hour"] if hours else None,
        "event_precision": match.precision,
        "event_recall": match.recall,
        "event_f1": match.f1,
        "time_error_median_s": s["time_error_median_s"] if rate else None,
        "time_error_p95_s": s["time_error_p95_s"] if rate else None,
        "tolerance_s": tolerance / rate if rate else None,
        "tolerance_samples": tolerance,
        "match": how,
    }


def hours_of(store: Store, ranges: np.ndarray) -> float | None:
    """Hours of signal in ``ranges`` (None without a sample rate)."""
    if not store.sample_rate:
        return None
    r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    return float((r[:, 1] - r[:, 0]).sum()) / store.sample_rate / 3600


def events_in(store: Store, ranges: np.ndarray) -> np.ndarray:
    """The store's event markers that fall inside ``ranges`` (sorted, as the store keeps them)."""
    ev = store.events
    keep = np.zeros(ev.size, dtype=bool)
    for a, b in ranges.tolist():
        keep |= (ev >= a) & (ev < b)
    return ev[keep]
