"""The class of every window of a store under a label rule, and how many windows each class holds.

The arithmetic itself (chunkfit.core.windows) is pure numpy; a ``Labeller`` reads what it needs
from the store: event markers for ``any-event``, per-sample labels for ``last`` and ``majority``.
"""

from __future__ import annotations

import numpy as np

from ..errors import WindowError
from ..store import Store
from .windows import any_event_labels, class_indices, count_windows, last_labels, majority_labels

_PIECE = 1 << 20  # windows labelled at a time while counting


def positive_index(n_classes: int) -> int:
    """Index of the class scored as "event": class 1 of event/no event, else the last class."""
    return 1 if n_classes == 2 else n_classes - 1


class Labeller:
    """Classes of windows for one store and label rule."""

    def __init__(self, store: Store, rule: str) -> None:
        self.store = store
        self.rule = rule
        if rule == "any-event":
            if not store.has_events:
                hint = (
                    "; it has per-sample labels: use --label last or --label majority"
                    if store.has_labels
                    else ""
                )
                raise WindowError(
                    f"{store.path}: label rule any-event needs event markers, but the store has "
                    f"none{hint}"
                )
            self.classes: list[int] = [0, 1]
        else:
            if not store.has_labels:
                hint = "; it has events: use --label any-event" if store.has_events else ""
                raise WindowError(
                    f"{store.path}: label rule {rule} needs per-sample labels, but the store has "
                    f"none{hint}"
                )
            self.classes = store.label_classes
            if len(self.classes) < 2:
                raise WindowError(
                    f"{store.path}: training needs at least 2 label classes (found {self.classes})"
                )

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def labels(self, a: int, b: int, starts: np.ndarray, window: int) -> np.ndarray:
        """Class index of windows starting at ``starts`` (relative to ``a``) inside samples
        [a, b)."""
        if self.rule == "any-event":
            return any_event_labels(starts, window, self.store.events_in(a, b) - a)
        cls = class_indices(self.store.read_labels(a, b), self.classes)
        if self.rule == "last":
            return last_labels(cls, starts, window)
        return majority_labels(cls, starts, window, self.n_classes)


def class_counts(labeller: Labeller, ranges: np.ndarray, window: int, stride: int) -> np.ndarray:
    """Training windows of each class index in ``ranges``, labelled a bounded number at a time."""
    counts = np.zeros(labeller.n_classes, dtype=np.int64)
    for a, b in np.asarray(ranges, dtype=np.int64).reshape(-1, 2):
        n = count_windows(int(b - a), window, stride)
        for k0 in range(0, n, _PIECE):
            m = min(_PIECE, n - k0)
            lo = int(a) + k0 * stride
            starts = np.arange(m, dtype=np.int64) * stride
            labels = labeller.labels(lo, lo + (m - 1) * stride + window, starts, window)
            counts += np.bincount(labels, minlength=labeller.n_classes)
    return counts
