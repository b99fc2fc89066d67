"""Sample indices as times: seconds since the store's first sample, and UTC where it is known.

Seconds run segment by segment. Segment 0 starts at ``start_0 / rate`` (0 for a store ingested
whole). Segment k starts where segment k - 1 started plus the time between their starts: measured
when both have start times on one clock (both UTC, or both read from the same source's numeric
time column, chunkfit.store.segtimes), else their distance in samples over the rate (the segments
end to end, as a store without times has them). So after a gap of 8.3 s the seconds jump by 8.3 s
where the store knows it, and count only recorded samples where it does not. A segment whose
recorded start lies before the end of the one before it is placed right after it (seconds never
go backwards).

Example: rate 100 Hz, segments [0, 100) at 12:00:00 UTC and [100, 200) at 12:00:10 UTC: sample 150
is at 10.5 s and 12:00:10.500000 UTC; without times it is at 1.5 s and has no UTC time.
"""

from __future__ import annotations

import numpy as np

from ..store import Store
from ..store.segtimes import SegmentTime, iso_utc


class Timeline:
    """Seconds and UTC times of samples of a store with these segments, rate and segment times."""

    def __init__(
        self, segments: np.ndarray, rate: float | None, times: list[SegmentTime | None]
    ) -> None:
        self.segments = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
        self.rate = rate
        self.times = times
        self.has_utc = any(t is not None and t.utc_us is not None for t in times)
        self.offsets = self._offsets() if rate else None

    @classmethod
    def of(cls, store: Store) -> Timeline:
        """The timeline of an open store."""
        return cls(store.segments, store.sample_rate, store.segment_times)

    def _offsets(self) -> np.ndarray:
        assert self.rate
        seg, out = self.segments, np.zeros(self.segments.shape[0], dtype=np.float64)
        for k in range(seg.shape[0]):
            if k == 0:
                out[k] = seg[0, 0] / self.rate
                continue
            by_samples = (seg[k, 0] - seg[k - 1, 0]) / self.rate
            now, before = self.times[k], self.times[k - 1]
            step = by_samples
            if now is not None and before is not None and now.same_clock(before):
                step = max(now.minus(before), (seg[k - 1, 1] - seg[k - 1, 0]) / self.rate)
            out[k] = out[k - 1] + step
        return out

    def segment_of(self, sample: int) -> int:
        """The segment holding ``sample`` (or ending at it: the end of a span is exclusive)."""
        k = int(np.searchsorted(self.segments[:, 0], sample, "right")) - 1
        return max(k, 0)

    def seconds(self, sample: int, segment: int) -> float | None:
        """Seconds since the store's first sample of ``sample`` in ``segment``; None without a
        rate."""
        if self.offsets is None or self.rate is None or segment >= self.offsets.size:
            return None
        return float(self.offsets[segment] + (sample - self.segments[segment, 0]) / self.rate)

    def utc(self, sample: int, segment: int) -> str | None:
        """ISO 8601 UTC of ``sample`` in ``segment``, to the microsecond; None where unknown."""
        if not self.rate or segment >= len(self.times):
            return None
        t = self.times[segment]
        if t is None or t.utc_us is None:
            return None
        us = t.utc_us + round((sample - int(self.segments[segment, 0])) * 1e6 / self.rate)
        return iso_utc(us)
