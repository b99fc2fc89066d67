"""Event-level scoring: detections matched one-to-one to event markers within a tolerance.

Detection i may match marker m when ``lo[i] - tolerance <= m <= hi[i] + tolerance``: with
``--match peak`` lo = hi = the detection's peak sample, with ``--match span`` [lo, hi] is the
detection's span. Each detection matches at most one marker and each marker at most one detection,
so a detection spanning a whole record finds one event, not all of them.

The pairing has the largest possible number of pairs: every detection allows a contiguous run of
the sorted markers, and taking the detections by increasing ``hi + tolerance``, each the earliest
marker still free that it allows, is optimal for such interval-to-point matchings (an exchange
argument: any maximum matching can be rewritten into this one pair by pair). Time errors are
``peak - marker`` of the pairs, in samples.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class EventMatch:
    """The pairs (marker index, detection index) of a one-to-one matching, and what they give."""

    pairs: np.ndarray  # int64 [k, 2]: marker index, detection index, by marker
    n_markers: int
    n_detections: int
    errors: np.ndarray  # int64 [k]: peak - marker of each pair, in samples

    @property
    def found(self) -> int:
        return int(self.pairs.shape[0])

    @property
    def false_alarms(self) -> int:
        return self.n_detections - self.found

    @property
    def missed(self) -> int:
        return self.n_markers - self.found

    @property
    def precision(self) -> float:
        return self.found / self.n_detections if self.n_detections else math.nan

    @property
    def recall(self) -> float:
        return self.found / self.n_markers if self.n_markers else math.nan

    @property
    def f1(self) -> float:
        total = self.n_markers + self.n_detections
        return 2 * self.found / total if total else math.nan

    def summary(self, rate: float, hours: float) -> dict[str, Any]:
        """The event figures as evaluate reports them: counts, precision, recall, F1, false alarms
        per hour of ``hours`` scored, and the median and 95th-percentile absolute time error of the
        peaks in seconds (``rate`` samples a second)."""
        err = np.abs(self.errors) / rate
        return {
            "markers": self.n_markers,
            "detections": self.n_detections,
            "found": self.found,
            "missed": self.missed,
            "false_alarms": self.false_alarms,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "false_alarms_per_hour": self.false_alarms / hours if hours > 0 else math.nan,
            "time_error_median_s": float(np.median(err)) if err.size else math.nan,
            "time_error_p95_s": float(np.percentile(err, 95)) if err.size else math.nan,
        }


def match_events(
    markers: np.ndarray,
    peaks: np.ndarray,
    tolerance: int,
    *,
    lo: np.ndarray | None = None,
    hi: np.ndarray | None = None,
) -> EventMatch:
    """Match ``peaks`` (detection peak samples) to ``markers`` (event samples) one to one.

    ``tolerance`` is in samples. With ``lo``/``hi`` (each detection's first and last sample) a
    detection may match any marker within tolerance of its span; without them, of its peak.

    Example: markers [100, 200], peaks [105, 150], tolerance 10 -> marker 100 pairs with peak 105
    (error +5); peak 150 is a false alarm; marker 200 is missed.
    """
    markers = np.sort(np.asarray(markers, dtype=np.int64))
    peaks = np.asarray(peaks, dtype=np.int64)
    lo = peaks if lo is None else np.asarray(lo, dtype=np.int64)
    hi = peaks if hi is None else np.asarray(hi, dtype=np.int64)
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0 samples, not {tolerance}")
    first = np.searchsorted(markers, lo - tolerance, "left")  # earliest marker each allows
    last = np.searchsorted(markers, hi + tolerance, "right")  # one past the latest
    free = np.arange(markers.size + 1, dtype=np.int64)  # union-find: next free marker at or after

    def next_free(j: int) -> int:
        root = j
        while free[root] != root:
            root = int(free[root])
        while free[j] != root:
            free[j], j = root, int(free[j])
        return root

    pairs: list[tuple[int, int]] = []
    for i in np.lexsort((lo, hi + tolerance)).tolist():
        j = next_free(int(first[i]))
        if j < last[i]:
            pairs.append((j, i))
            free[j] = j + 1
    arr = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    errors = peaks[arr[:, 1]] - markers[arr[:, 0]]
    return EventMatch(arr, int(markers.size), int(peaks.size), errors)
