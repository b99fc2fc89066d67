"""Window and label arithmetic: which windows exist, which are held out, and what class each has.

Everything here is pure numpy on sample indices; nothing reads a store.

Conventions, with window W and stride S:

- a *range* [a, b) is a half-open span of samples inside one segment;
- window k of a range covers samples [a + k*S, a + k*S + W), for k = 0 .. count_windows(b - a) - 1;
- windows never cross a segment boundary, because ranges never do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..config import SplitSpec, WindowSpec
from ..errors import WindowError


def count_windows(length: int, window: int, stride: int = 1) -> int:
    """Number of windows that fit in ``length`` samples.

    Example: length 10, window 4, stride 3 -> starts 0, 3, 6 -> 3 windows
    (start 9 would need samples 9..12).
    """
    if length < window:
        return 0
    return (length - window) // stride + 1


def window_starts(a: int, b: int, window: int, stride: int = 1) -> np.ndarray:
    """First sample of every window inside [a, b), int64.

    Example: a=100, b=110, window=4, stride=3 -> [100, 103, 106].
    """
    return a + stride * np.arange(count_windows(b - a, window, stride), dtype=np.int64)


def split_segment(
    a: int, b: int, window: int, validation: float
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Split segment [a, b) into a training range and a validation range.

    The validation range is the last ``round(validation * (b - a))`` samples. The ``window`` samples
    just before it belong to neither, so the last training window ends at least ``window`` samples
    before the first validation window starts: no sample is shared.

    Example: a=0, b=1000, window=50, validation=0.1 -> train [0, 850), validation [900, 1000).
    With validation=0 the whole segment trains: train [0, 1000), validation [1000, 1000).
    """
    held = round(validation * (b - a))
    if held <= 0:
        return (a, b), (b, b)
    v0 = b - held
    return (a, max(a, v0 - window)), (v0, b)


@dataclasses.dataclass(frozen=True)
class Split:
    """Training and validation ranges ([R, 2] int64): one row per segment, or, when whole segments
    are held out (``held``: their indices), the training segments and the held-out ones."""

    train: np.ndarray
    validation: np.ndarray
    window: int
    stride: int
    held: tuple[int, ...] | None = None

    def train_windows(self) -> int:
        return _total(self.train, self.window, self.stride)

    def validation_windows(self) -> int:
        return _total(self.validation, self.window, self.stride)

    def to_dict(self) -> dict[str, Any]:
        return {
            "train_ranges": self.train.tolist(),
            "validation_ranges": self.validation.tolist(),
            "train_windows": self.train_windows(),
            "validation_windows": self.validation_windows(),
            **({"validation_segments": list(self.held)} if self.held is not None else {}),
        }


def _total(ranges: np.ndarray, window: int, stride: int) -> int:
    return sum(count_windows(int(b - a), window, stride) for a, b in ranges)


def held_segments(
    lengths: np.ndarray, window: int, stride: int, count: float, seed: int
) -> list[int]:
    """Indices (sorted) of the segments held out for validation: ``count`` of those that hold a
    window (a fraction of them, rounded, at least 1, when ``count`` < 1), chosen by ``seed``.

    Example: lengths [500, 50, 500, 500], window 100, count 0.5 -> 2 of segments 0, 2, 3 (segment 1
    holds no window), the same 2 for the same seed.
    """
    usable = np.flatnonzero([count_windows(int(n), window, stride) > 0 for n in lengths])
    k = int(count) if count >= 1 else max(1, round(count * usable.size))
    order = np.random.default_rng([seed, 2]).permutation(usable.size)
    return sorted(int(i) for i in usable[order[:k]])


def plan_split(
    segments: np.ndarray,
    windows: WindowSpec,
    split: SplitSpec,
    where: str | None = None,
    seed: int = 0,
) -> Split:
    """Cut every segment into training and validation ranges; refuse splits that cannot train.

    Raises ``WindowError`` when the window is longer than every segment, when no training window
    is left, or when validation was asked for but no validation window fits. ``where`` (the store)
    starts each message. With ``split.segments``, whole segments are held out (``held_segments``
    with ``seed``).
    """
    at = f"{where}: " if where is not None else ""
    seg = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    w = windows.window
    if seg.shape[0] == 0:
        raise WindowError(f"{at}the store has no segments, so there are no windows to train on")
    longest = int((seg[:, 1] - seg[:, 0]).max())
    if w > longest:
        raise WindowError(
            f"{at}window must be at most the longest segment (received window={w}, longest segment="
            f"{longest} samples); use a smaller --window"
        )
    if split.segments is not None:
        return _hold_out_segments(seg, windows, split.segments, seed, at)
    pairs = [split_segment(int(a), int(b), w, split.validation) for a, b in seg]
    out = Split(
        train=np.array([p[0] for p in pairs], dtype=np.int64).reshape(-1, 2),
        validation=np.array([p[1] for p in pairs], dtype=np.int64).reshape(-1, 2),
        window=w,
        stride=windows.stride,
    )
    if out.train_windows() == 0:
        raise WindowError(
            f"{at}no training window is left after holding out validation={split.validation} of "
            f"each segment plus a gap of window={w} samples (longest segment={longest} samples); "
            "use a smaller --window or --validation"
        )
    if split.validation > 0 and out.validation_windows() == 0:
        raise WindowError(
            f"{at}validation={split.validation} of each segment holds no whole window of {w} "
            "samples "
            f"(longest segment={longest} samples); raise --validation, lower --window, or use "
            "--validation 0"
        )
    return out


def _hold_out_segments(
    seg: np.ndarray, windows: WindowSpec, count: float, seed: int, at: str
) -> Split:
    w, stride = windows.window, windows.stride
    usable = sum(count_windows(int(b - a), w, stride) > 0 for a, b in seg)
    if count >= 1 and count >= usable:
        raise WindowError(
            f"{at}--validation-segments {int(count)} leaves no segment to train on: {usable} "
            "segment(s) hold a "
            f"window of {w} samples; hold out fewer, or use --validation to hold out the end of "
            "each segment"
        )
    held = held_segments(seg[:, 1] - seg[:, 0], w, stride, count, seed)
    if len(held) >= usable:
        raise WindowError(
            f"{at}--validation-segments {count} holds out all {usable} segment(s) that hold a "
            "window; "
            "hold out a smaller share, or use --validation to hold out the end of each segment"
        )
    keep = np.ones(seg.shape[0], dtype=bool)
    keep[held] = False
    return Split(train=seg[keep], validation=seg[held], window=w, stride=stride, held=tuple(held))


# -- labels --------------------------------------------------------------------------------------

IGNORED = -1
"""The class index of a window that weighs nothing: left out of training, of the class counts and
of window-level figures (a marker too close to the edge of the span its rule looks at)."""


def span_labels(
    starts: np.ndarray, events: np.ndarray, span: tuple[int, int], margin: int = 0
) -> np.ndarray:
    """Class of each window by where its event markers lie relative to its start (int32).

    A marker at offset o = e - start makes the window positive (1) when A + margin <= o < B -
    margin, for ``span`` (A, B); failing that, ``IGNORED`` (-1) when some marker lies within
    ``margin`` of A or of B, on either side (A - margin <= o < A + margin or B - margin <= o <
    B + margin); else 0. A marker just before the window's start is such a case: the window shows
    the event's aftermath but not its onset.

    Example: starts [0, 10, 20], span (0, 10) (any-event, window 10), margin 2, events [13, 29]
    -> [0, 1, -1]: window 10 holds 13 at offset 3 (inside [2, 8)), window 20 holds 29 at offset 9
    (within 2 of its end). With margin 0 this is ``any_event_labels``.
    ``events`` must be sorted; starts and events use the same origin.
    """
    s = np.asarray(starts, dtype=np.int64)
    ev = np.asarray(events, dtype=np.int64)
    a, b = span

    def hits(lo: int, hi: int) -> np.ndarray:
        return np.searchsorted(ev, s + hi, "left") - np.searchsorted(ev, s + lo, "left") > 0

    out = hits(a + margin, b - margin).astype(np.int32)
    if margin:
        near = hits(a - margin, a + margin) | hits(b - margin, b + margin)
        out[near & (out == 0)] = IGNORED
    return out


def any_event_labels(starts: np.ndarray, window: int, events: np.ndarray) -> np.ndarray:
    """Class 1 where at least one event index falls in [start, start + window), else 0 (int32).

    Example: starts [0, 5], window 4, events [6] -> [0, 1] (window 0 is samples 0..3).
    ``events`` must be sorted; starts and events use the same origin.
    """
    s = np.asarray(starts, dtype=np.int64)
    ev = np.asarray(events, dtype=np.int64)
    hits = np.searchsorted(ev, s + window, "left") - np.searchsorted(ev, s, "left")
    return (hits > 0).astype(np.int32)


def last_labels(classes: np.ndarray, starts: np.ndarray, window: int) -> np.ndarray:
    """Class of each window's last sample, ``classes[start + window - 1]`` (int32).

    Example: classes [0, 0, 1, 2], starts [0, 1], window 3 -> [1, 2].
    """
    return np.asarray(classes)[np.asarray(starts, dtype=np.int64) + window - 1].astype(np.int32)


def majority_labels(
    classes: np.ndarray, starts: np.ndarray, window: int, n_classes: int
) -> np.ndarray:
    """Most frequent class in each window; ties go to the smallest class index (int32).

    Example: classes [0, 1, 1, 0, 2], starts [0, 2], window 3 -> [1, 0]: window 1 holds 1, 0, 2
    once each, and the tie goes to class 0.
    ``classes`` are class indices 0 .. n_classes - 1.
    """
    c = np.asarray(classes, dtype=np.int64)
    s = np.asarray(starts, dtype=np.int64)
    best = np.zeros(s.shape[0], dtype=np.int64)
    best_count = np.full(s.shape[0], -1, dtype=np.int64)
    for k in range(n_classes):
        cum = np.concatenate(([0], np.cumsum(c == k, dtype=np.int64)))
        count = cum[s + window] - cum[s]
        better = count > best_count
        best[better] = k
        best_count[better] = count[better]
    return best.astype(np.int32)


def class_indices(values: np.ndarray, classes: list[int]) -> np.ndarray:
    """Map stored label values to class indices 0 .. len(classes) - 1 (``classes`` sorted)."""
    table = np.asarray(classes, dtype=np.int64)
    v = np.asarray(values, dtype=np.int64)
    idx = np.searchsorted(table, v)
    bad = (idx >= table.size) | (table[np.minimum(idx, table.size - 1)] != v)
    if bad.any():
        raise WindowError(
            f"label value {int(v[bad][0])} is not one of the store's label classes {classes}; "
            "the store is inconsistent: re-ingest it"
        )
    return idx.astype(np.int32)
