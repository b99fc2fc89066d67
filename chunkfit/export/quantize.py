"""The representative windows that calibrate an int8 model: a seeded sample of the run's training
split, read from the store it trained on.

Post-training int8 quantisation picks each tensor's scale from the values it sees on these windows,
so they must look like what the device will meet: the run's own signal, raw (the normalisation is
inside the model), with events among them. An event detector's training split is mostly quiet
signal; a plain random sample of a few hundred windows can hold no event at all, and the scales
then clip the very values that make a detection. So up to half the sample is event windows when the
split has them.

Memory stays bounded whatever the store's size: window indices are drawn without listing the
split's windows, candidates are labelled one window at a time, and only the kept windows are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core.labels import Labeller
from ..core.windows import count_windows
from ..errors import WindowError
from ..store import Store

WINDOWS = 300  # windows in the representative set
CANDIDATES = 8  # windows labelled for each one kept, to find the event windows among them
EVENT_SHARE = 0.5  # at most this share of the set is event windows


@dataclasses.dataclass(frozen=True)
class Representative:
    """The calibration windows, float32 [n, window, channels], raw signal."""

    windows: np.ndarray
    events: int  # how many of them are event windows

    def batches(self) -> Iterator[list[np.ndarray]]:
        """One window at a time, as LiteRT's converter takes a representative dataset."""
        for i in range(len(self.windows)):
            yield [self.windows[i : i + 1]]


def split_starts(ranges: np.ndarray, picks: np.ndarray, window: int, stride: int) -> np.ndarray:
    """The first samples of windows numbered ``picks`` (sorted) over ``ranges`` in order.

    Example: ranges [[0, 10], [20, 26]], window 4, stride 3 -> windows 0..2 start at 0, 3, 6 and
    window 3 at 20; picks [1, 3] -> [3, 20].
    """
    counts = np.array([count_windows(int(b - a), window, stride) for a, b in ranges], np.int64)
    ends = np.cumsum(counts)
    which = np.searchsorted(ends, picks, side="right")
    offset = picks - (ends[which] - counts[which])
    return ranges[which, 0] + offset * stride


def representative(
    store: Store,
    meta: dict[str, Any],
    *,
    window: int,
    stride: int,
    positive: int,
    n: int = WINDOWS,
) -> Representative:
    """A seeded sample of ``n`` windows of the run's training split (``meta``: its run.json),
    up to half of them event windows."""
    split = meta.get("split", {}) if isinstance(meta.get("split"), dict) else {}
    ranges = np.asarray(split.get("train_ranges", []), dtype=np.int64).reshape(-1, 2)
    ranges = ranges[ranges[:, 1] - ranges[:, 0] >= window]
    total = sum(count_windows(int(b - a), window, stride) for a, b in ranges)
    if total == 0:
        raise WindowError(
            f"{store.path}: the run's training split holds no window to calibrate int8 on; "
            "export without --quantize int8"
        )
    wcfg = meta.get("config", {}).get("windows", {})
    labeller = Labeller(store, str(wcfg.get("label", "any-event")), int(wcfg.get("margin", 0)))
    seed = int(meta.get("config", {}).get("blocks", {}).get("seed", 0) or 0)
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(total, min(total, n * CANDIDATES), replace=False))
    starts = rng.permutation(split_starts(ranges, picks, window, stride))
    one = np.zeros(1, np.int64)
    is_event = np.array(
        [labeller.labels(int(s), int(s) + window, one, window)[0] == positive for s in starts],
        dtype=bool,
    )
    n = min(n, len(starts))
    events = starts[is_event][: int(n * EVENT_SHARE)]
    quiet = starts[~is_event][: n - len(events)]
    if len(events) + len(quiet) < n:  # too few quiet windows: more event windows fill the set
        events = starts[is_event][: n - len(quiet)]
    kept = np.sort(np.concatenate([events, quiet]))
    windows = np.stack([store.read(int(s), int(s) + window) for s in kept]).astype(np.float32)
    return Representative(windows, len(events))
