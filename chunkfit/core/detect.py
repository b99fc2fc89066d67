"""Turning window scores into detections: one per event, with its span, peak time and segment.

Windows arrive in start order, block after block, each block inside one segment. Window k covers
samples [s_k, s_k + window). Within a segment:

- a *run* is a row of consecutive positive windows (starts ``stride`` apart, none negative between);
- runs whose spans overlap, touch, or leave at most ``merge_gap`` samples between them are one
  *event*: detection [first start, last positive start + window). An event never crosses a segment;
- the peak score is the highest score of the event (the first window of a tie);
- the *peak* (the event time estimate, what evaluation matches to markers) is the middle of what the
  run holding the peak window has in common: a window is positive when a marker lies in its label
  region [s + a, s + b) (the whole window, (0, window), by default), so a run of starts f .. l
  agrees on [l + a, f + b), whose middle sample is ``(f + l + a + b - 1) // 2``; it is kept inside
  the peak window's own region. Example: window 4, stride 1, a marker at sample 10 and a perfect
  model: windows 7 .. 10 are positive, they share [10, 11), and the peak is 10;
- a detection shorter than ``min_duration`` samples (``end - start``) is dropped: a single
  positive window lasts one window.

A detection is returned once no later window can join it, so ``predict --follow`` writes it as
soon as its event is over. A per-sample model's detections (peaks with their scores) are built by
``point_detections``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import UsageError


def is_positive(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Scores at or above ``threshold``, compared in float64 as BinaryMetrics compares them.

    Comparing float32 scores with a Python float rounds the threshold to float32 first, which
    would count float32(0.7) = 0.69999998 as reaching 0.7.
    """
    return np.asarray(scores, dtype=np.float64) >= threshold


@dataclasses.dataclass(frozen=True)
class Detection:
    """One event: samples [start, end), its highest score, its time estimate and its segment."""

    start: int  # first sample of the first positive window
    end: int  # one past the last sample of the last positive window
    peak_score: float
    peak: int  # sample index of the event time estimate
    segment: int = 0
    peak_start: int | None = None  # start of the window with the peak score (window models)


def point_detections(
    peaks: np.ndarray, scores: np.ndarray, segments: np.ndarray
) -> list[Detection]:
    """Detections of a per-sample model: one sample each, at each peak with its score, in the
    segment (rows [start, stop) of ``segments``) that holds it."""
    peaks = np.asarray(peaks, dtype=np.int64)
    seg = np.searchsorted(np.asarray(segments)[:, 0], peaks, "right") - 1
    return [
        Detection(int(p), int(p) + 1, float(v), int(p), int(max(k, 0)))
        for p, v, k in zip(peaks.tolist(), np.asarray(scores).tolist(), seg.tolist(), strict=True)
    ]


@dataclasses.dataclass
class _Open:
    """The event being built: its first and last positive starts, the current run, the peak."""

    first: int
    last: int
    run_first: int
    peak_score: float
    peak_start: int
    peak_run: tuple[int, int]
    peak_in_run: bool


class RunMerger:
    """Streams (starts, scores, segment) in increasing start order and returns finished detections.

    ``merge_gap`` and ``min_duration`` are in samples; ``region`` is the part (a, b) of a window
    whose marker makes it positive (the label rule; the whole window by default).
    """

    def __init__(
        self,
        window: int,
        stride: int,
        threshold: float,
        *,
        merge_gap: int = 0,
        min_duration: int = 0,
        region: tuple[int, int] | None = None,
    ) -> None:
        self.window = window
        self.stride = stride
        self.threshold = threshold
        self.merge_gap = merge_gap
        self.min_duration = min_duration
        self.region = region if region is not None else (0, window)
        self._open: _Open | None = None
        self._segment: int | None = None
        self._seen: int | None = None  # the last start seen in the segment
        self._in_run = False  # the last window seen was positive

    def push(self, starts: np.ndarray, scores: np.ndarray, segment: int) -> list[Detection]:
        out: list[Detection] = []
        if segment != self._segment:
            out += self.flush()
            self._segment, self._seen, self._in_run = segment, None, False
        if starts.size == 0:
            return out
        if self._seen is not None and int(starts[0]) != self._seen + self.stride:
            self._in_run = False  # a hole in the starts: no run continues across it
        pos = np.flatnonzero(is_positive(scores, self.threshold))
        heads, tails, best = _runs(pos, np.asarray(scores))
        at, values = starts.tolist(), np.asarray(scores).tolist()
        for h, t, k in zip(heads.tolist(), tails.tolist(), best.tolist(), strict=True):
            out += self._add(at[h], at[t], values[k], at[k], h == 0 and self._in_run)
            self._in_run = True
        self._in_run = bool(pos.size and pos[-1] == starts.size - 1)
        self._seen = int(starts[-1])
        o = self._open
        if o is not None and self._seen >= o.last + self.window + self.merge_gap:
            out += self._close()  # no later window can join it
        return out

    def _add(
        self, first: int, last: int, best: float, best_start: int, continues: bool
    ) -> list[Detection]:
        """A run of positive starts [first, last] with its best window; ``continues``: it extends
        the run the last block ended with."""
        out: list[Detection] = []
        o = self._open
        if o is not None and not continues and first - (o.last + self.window) > self.merge_gap:
            out += self._close()
            o = None
        if o is None:
            self._open = _Open(first, last, first, best, best_start, (first, last), True)
            return out
        if not continues:
            o.run_first, o.peak_in_run = first, False
        o.last = last
        if o.peak_in_run:
            o.peak_run = (o.run_first, last)
        if best > o.peak_score:
            o.peak_score, o.peak_start = best, best_start
            o.peak_run, o.peak_in_run = (o.run_first, last), True
        return out

    def _close(self) -> list[Detection]:
        o, self._open = self._open, None
        if o is None:
            return []
        start, end = o.first, o.last + self.window
        if end - start < self.min_duration:
            return []
        a, b = self.region
        f, last = o.peak_run
        peak = min(max((f + last + a + b - 1) // 2, o.peak_start + a), o.peak_start + b - 1)
        return [Detection(start, end, o.peak_score, peak, self._segment or 0, o.peak_start)]

    def flush(self) -> list[Detection]:
        """The event still open (the last block of the store or of a segment was scored)."""
        return self._close()


def _runs(pos: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, last, best) index of each row of consecutive indices in ``pos`` (sorted), ``best``
    the first of the row's highest ``scores``: whole arrays, as a block may hold many rows.

    Example: pos [2, 3, 4, 9], scores[2:5] = [0.6, 0.8, 0.8], scores[9] = 0.7 -> first [2, 9],
    last [4, 9], best [3, 9].
    """
    if pos.size == 0:
        return pos, pos, pos
    cut = np.flatnonzero(np.diff(pos) != 1) + 1
    first, last = np.r_[0, cut], np.r_[cut - 1, pos.size - 1]
    values = scores[pos]
    lengths = last - first + 1
    top = np.flatnonzero(values == np.repeat(np.maximum.reduceat(values, first), lengths))
    row = np.repeat(np.arange(first.size), lengths)[top]
    best = top[np.r_[True, np.diff(row) != 0]]
    return pos[first], pos[last], pos[best]


def gap_samples(seconds: float, rate: float | None, flag: str) -> int:
    """``--merge-gap`` or ``--min-duration`` (seconds) in samples of a store at ``rate`` Hz."""
    if not (seconds >= 0 and np.isfinite(seconds)):
        raise UsageError(f"{flag} must be a number of seconds, 0 or more (received {seconds})")
    if seconds == 0:
        return 0
    if not rate:
        raise UsageError(
            f"{flag} is in seconds and the store has no sample rate; drop {flag}, or ingest the "
            "store again with --rate"
        )
    return int(round(seconds * rate))
