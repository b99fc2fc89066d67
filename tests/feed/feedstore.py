"""The feed tests' small store and the brute-force enumeration of its windows.

Channel 0 of the store is the sample index itself (exact in float32), so a window fed with
``normalize="none"`` says where it starts: ``x[:, 0, 0]``. Three segments, with a gap of 200 samples
between the first two; events every 37 samples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from support import make_store

SEGMENTS = [(0, 800), (1000, 1900), (1900, 2600)]
N = 2600
EVENTS = np.arange(5, N, 37)
WINDOW = 16


def feed_store(path: Path) -> Path:
    rng = np.random.default_rng(0)
    signal = np.stack([np.arange(N, dtype=np.float32), rng.normal(size=N).astype(np.float32)], 1)
    return make_store(path, signal, segments=SEGMENTS, events=EVENTS)


def brute_windows(ranges: Iterable[tuple[int, int]], stride: int = 1) -> Counter[tuple[int, int]]:
    """(start, any-event label) of every window inside ``ranges``, one by one."""
    out: Counter[tuple[int, int]] = Counter()
    for a, b in ranges:
        s = a
        while s + WINDOW <= b:
            label = int(any(s <= e < s + WINDOW for e in EVENTS))
            out[(s, label)] += 1
            s += stride
    return out


def tail_split(
    validation: float, stride: int = 1
) -> tuple[Counter[tuple[int, int]], Counter[tuple[int, int]]]:
    """Training and validation windows with the last ``validation`` of every segment held out and
    a window's length left between them, enumerated window by window."""
    train, val = [], []
    for a, b in SEGMENTS:
        held = round(validation * (b - a))
        cut = b - held
        train.append((a, cut - WINDOW if held else b))
        val.append((cut, b))
    return brute_windows(train, stride), brute_windows(val, stride)


def seen(batches: Iterable[tuple[np.ndarray, np.ndarray]]) -> Counter[tuple[int, int]]:
    """(start, label) of every window of ``(x, y)`` batches (y one-hot or class indices)."""
    out: Counter[tuple[int, int]] = Counter()
    for x, y in batches:
        x, y = np.asarray(x), np.asarray(y)
        labels = y.argmax(-1) if y.ndim == 2 else y
        out.update(zip(x[:, 0, 0].astype(int).tolist(), labels.astype(int).tolist(), strict=True))
    return out
