"""A dense picker run over a store: its per-sample scores stitched per range, its picks, and the
threshold chosen on event F1.

The windows are scored with a stride of half the window, and each sample keeps the score of the
window it lies most central in (chunkfit.core.picks.stitch), away from the windows' edges where the
network sees the least context. The picks are the peaks of that trace (``peak_picks``), at least
the pick width apart; a pick matches a marker within the pick width (chunkfit.core.matching).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..config import WindowSpec
from ..store import Store
from .events import event_figures, events_in, hours_of
from .matching import EventMatch, match_events
from .picks import peak_picks, stitch
from .scoring import Predictor, score_store

# The thresholds tried on the validation split: 0.05, 0.10, ..., 0.95.
THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(1, 20))


def pick_stride(window: int) -> int:
    """The stride a picker's windows are scored with: half the window (at least 1)."""
    return max(1, window // 2)


def pick_traces(
    predictor: Predictor,
    store: Store,
    windows: WindowSpec,
    ranges: np.ndarray,
    *,
    chunk: int = 200_000,
) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(lo, hi, trace)`` for every range [lo, hi) at least a window long: the picker's score for
    each of its samples (NaN for the last few no window covers)."""
    w = dataclasses.replace(windows, stride=pick_stride(windows.window))
    for a, b in np.asarray(ranges, dtype=np.int64).reshape(-1, 2).tolist():
        if b - a < w.window:
            continue
        starts, outs = [], []
        for sb in score_store(predictor, store, w, chunk=chunk, ranges=np.asarray([[a, b]])):
            starts.append(sb.starts)
            outs.append(sb.probs.reshape(sb.starts.size, -1))
        yield a, b, stitch(np.concatenate(starts), np.concatenate(outs), a, b)


def picks_of(traces: list[tuple[int, int, np.ndarray]], threshold: float, width: int) -> np.ndarray:
    """The absolute samples of the peaks of ``traces`` at or above ``threshold``."""
    found = [lo + peak_picks(trace, threshold, width) for lo, _, trace in traces]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def choose_pick_threshold(
    predictor: Predictor, store: Store, windows: WindowSpec, ranges: np.ndarray, width: int
) -> dict[str, Any] | None:
    """The threshold of ``THRESHOLDS`` whose picks on ``ranges`` (the validation split) have the
    highest event F1 against the markers there (the lower on a tie), with its figures in the
    keys a classifier's choice has (chunkfit.core.threshold); None without markers there."""
    markers = events_in(store, np.asarray(ranges, dtype=np.int64).reshape(-1, 2))
    traces = list(pick_traces(predictor, store, windows, ranges))
    if markers.size == 0 or not traces:
        return None
    best: tuple[float, EventMatch] | None = None
    for t in THRESHOLDS:
        m = match_events(markers, picks_of(traces, t, width), width)
        if best is None or np.nan_to_num(m.f1, nan=-1) > np.nan_to_num(best[1].f1, nan=-1):
            best = t, m
    assert best is not None
    value, m = best
    hours = hours_of(store, ranges)
    return {
        "value": value,
        "rule": "event-f1",
        "split": "validation",
        "pr_auc": float("nan"),
        "precision": float(np.nan_to_num(m.precision)),
        "recall": float(np.nan_to_num(m.recall)),
        "f1": float(np.nan_to_num(m.f1)),
        **event_figures(m, store.sample_rate, hours, width, "peak"),
        "pick_width": width,
    }
