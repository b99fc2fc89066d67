"""The dense picker's arithmetic: per-sample targets from event markers, the per-sample scores of
overlapping windows stitched into one trace, and the peaks of that trace as picks.

A picker (``--model picker``) outputs an event probability for every sample of its window, as
seismic phase pickers do (PhaseNet: Zhu and Beroza, 2019). It learns from a target trace that rises
to 1 at each marker (``pick_targets``); its picks are the local maxima of its output above a
threshold, at least ``--pick-width`` samples apart (``peak_picks``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..store import Store
from .blocks import BlockData

DEFAULT_PICK_WIDTH = 21


def pick_targets(markers: np.ndarray, start: int, stop: int, width: int) -> np.ndarray:
    """float32 [stop - start]: the target of every sample of [start, stop), a triangle of ``width``
    samples (its nonzero part) peaking at 1 on each marker; overlapping triangles take their max.

    Sample ``i`` at distance ``d`` from its nearest marker gets ``max(0, 1 - |d| / h)`` with
    ``h = (width + 1) / 2``. Example: markers [3], [0, 8), width 3 -> h 2 ->
    [0, 0, 0.5, 1, 0.5, 0, 0, 0]. Markers outside the range still reach into it.
    """
    h = (width + 1) / 2
    out = np.zeros(stop - start, dtype=np.float32)
    at = np.arange(start, stop, dtype=np.float64)
    reach = int(np.ceil(h))
    m = np.asarray(markers, dtype=np.int64)
    for e in m[(m > start - reach) & (m < stop + reach)].tolist():
        lo, hi = max(start, e - reach + 1), min(stop, e + reach)
        if lo < hi:
            tri = 1.0 - np.abs(at[lo - start : hi - start] - e) / h
            part = out[lo - start : hi - start]
            np.maximum(part, tri.astype(np.float32), out=part)
    return out


def stitch(starts: np.ndarray, outputs: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """float32 [hi - lo]: one score per sample of [lo, hi) from windows starting at ``starts``
    (absolute) with per-sample ``outputs`` [windows, window]: each sample takes the output of the
    window in which it lies nearest the centre (the earlier window on a tie); samples no window
    covers are NaN.

    Example: window 4, starts [0, 2], outputs [[a0, a1, a2, a3], [b0, b1, b2, b3]] over [0, 6) ->
    [a0, a1, a2, b1, b2, b3]: sample 2 is a's third (0.5 from its centre 1.5) and b's first (1.5),
    sample 3 a's last (1.5) and b's second (0.5).
    """
    n_win, window = outputs.shape
    at = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(window, dtype=np.int64)
    dist = np.abs(2 * np.arange(window, dtype=np.int64) - (window - 1))  # twice the distance
    dist = np.broadcast_to(dist, (n_win, window))
    keep = (at >= lo) & (at < hi)
    at, dist, vals = at[keep], dist[keep], outputs[keep]
    order = np.lexsort((dist, at))  # by sample, then nearest the centre first; stable: earlier
    at, vals = at[order], vals[order]
    first = np.ones(at.size, dtype=bool)
    first[1:] = at[1:] != at[:-1]
    out = np.full(hi - lo, np.nan, dtype=np.float32)
    out[at[first] - lo] = vals[first]
    return out


def peak_picks(scores: np.ndarray, threshold: float, distance: int) -> np.ndarray:
    """int64: the samples of ``scores`` that are local maxima at or above ``threshold``, at least
    ``distance`` samples apart, the higher kept first (the earlier on a tie); a flat top counts
    once, at its first sample. NaN never peaks.

    Example: [0, .6, .2, .9, .1, .7, .7, 0], threshold .5: distance 2 -> [1, 3, 5] (the flat top
    5-6 counts at 5); distance 3 -> [3] (1 and 5 lie within 3 of the higher 3).
    """
    s = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf)
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    # runs of equal values: a run is a peak when both neighbouring runs are lower
    first = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    v = s[first]
    lower_left = np.concatenate([[True], v[:-1] < v[1:]])
    lower_right = np.concatenate([v[1:] < v[:-1], [True]])
    cand = first[lower_left & lower_right & (v >= threshold)]
    order = cand[np.lexsort((cand, -s[cand]))]
    kept: list[int] = []
    taken = np.zeros(s.size, dtype=bool)
    for i in order.tolist():
        if not taken[i]:
            kept.append(i)
            taken[max(0, i - distance + 1) : i + distance] = True
    return np.sort(np.asarray(kept, dtype=np.int64))


def with_targets(data: BlockData, store: Store, width: int) -> BlockData:
    """``data`` with one more column after the channels: each sample's target from the store's
    markers (``pick_targets``), so that every window gathered from the samples carries its own
    targets through either engine's window gathering unchanged."""
    reach = width // 2 + 1
    parts = [
        pick_targets(store.events_in(b.start - reach, b.stop + reach), b.start, b.stop, width)
        for b in data.blocks
    ]
    targets = np.concatenate(parts)[:, None]
    samples = np.concatenate([data.samples, targets], axis=1).astype(np.float32, copy=False)
    return dataclasses.replace(data, samples=samples)
