"""Turning window scores into detections: runs of adjacent positive windows merged into one event.

Windows arrive in start order, block after block; a run may continue across a block boundary but
never across a segment boundary or a gap in the starts. Detection k covers samples
[first_start, last_start + window) and reports the peak score and where it occurred.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def is_positive(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Scores at or above ``threshold``, compared in float64 as BinaryMetrics compares them.

    Comparing float32 scores with a Python float rounds the threshold to float32 first, which
    would count float32(0.7) = 0.69999998 as reaching 0.7.
    """
    return np.asarray(scores, dtype=np.float64) >= threshold


@dataclasses.dataclass(frozen=True)
class Detection:
    start: int  # first sample of the first positive window
    end: int  # one past the last sample of the last positive window
    peak_score: float
    peak_start: int  # start of the window with the peak score


class RunMerger:
    """Streams (starts, scores) in increasing start order and yields finished detections.

    Two positive windows belong to the same run when their starts are ``stride`` apart (no
    negative window between them) and they lie in the same segment.
    """

    def __init__(self, window: int, stride: int, threshold: float) -> None:
        self.window = window
        self.stride = stride
        self.threshold = threshold
        self._open: list[float] | None = None  # [first, last, peak, peak_start]
        self._segment: int | None = None

    def push(self, starts: np.ndarray, scores: np.ndarray, segment: int) -> list[Detection]:
        out: list[Detection] = []
        if self._segment is not None and segment != self._segment:
            out += self.flush()
        self._segment = segment
        pos = np.flatnonzero(is_positive(scores, self.threshold))
        if pos.size == 0:
            if starts.size:
                out += self.flush()
            return out
        # A negative window before the first positive one closes an open run.
        if self._open is not None and (pos[0] != 0 or starts[0] != self._open[1] + self.stride):
            out += self.flush()
        breaks = np.flatnonzero(np.diff(pos) != 1) + 1
        groups = np.split(pos, breaks)
        for g in groups:
            first, last = int(starts[g[0]]), int(starts[g[-1]])
            k = int(g[np.argmax(scores[g])])
            peak, peak_start = float(scores[k]), int(starts[k])
            if self._open is not None:
                if peak > self._open[2]:
                    self._open[2], self._open[3] = peak, peak_start
                self._open[1] = last
            else:
                self._open = [first, last, peak, peak_start]
            if g[-1] != starts.size - 1:
                out += self.flush()
        return out

    def flush(self) -> list[Detection]:
        if self._open is None:
            return []
        first, last, peak, peak_start = self._open
        self._open = None
        return [Detection(int(first), int(last) + self.window, float(peak), int(peak_start))]
