"""The class of every window of a store under a label rule, and how many windows each class holds.

The arithmetic itself (chunkfit.core.windows) is pure numpy; a ``Labeller`` reads what it needs
from the store: event markers for ``any-event``, ``event-last=K`` and ``event-in=A:B``, per-sample
labels for ``last`` and ``majority``. With ``--label-margin`` some windows get the class index
``IGNORED`` (-1): they are left out of training, of the class counts and of window-level figures.
"""

from __future__ import annotations

import numpy as np

from ..config import event_span, is_event_rule
from ..errors import WindowError
from ..store import Store
from .windows import (
    IGNORED,
    class_indices,
    count_windows,
    last_labels,
    majority_labels,
    span_labels,
)

__all__ = ["IGNORED", "Labeller", "class_counts", "event_truth", "positive_index"]

_PIECE = 1 << 20  # windows labelled at a time while counting


def positive_index(n_classes: int) -> int:
    """Index of the class scored as "event": class 1 of event/no event, else the last class."""
    return 1 if n_classes == 2 else n_classes - 1


class Labeller:
    """Classes of windows for one store and label rule."""

    def __init__(self, store: Store, rule: str, margin: int = 0) -> None:
        self.store = store
        self.rule = rule
        self.margin = margin
        if is_event_rule(rule):
            if not store.has_events:
                hint = (
                    "; it has per-sample labels: use --label last or --label majority"
                    if store.has_labels
                    else ""
                )
                raise WindowError(
                    f"{store.path}: label rule {rule} needs event markers, but the store has "
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
        span = event_span(self.rule, window)
        if span is not None:
            # markers up to ``margin`` outside [a, b) can lie within the margin of a window's edge
            m = self.margin
            return span_labels(starts, self.store.events_in(a - m, b + m) - a, span, m)
        cls = class_indices(self.store.read_labels(a, b), self.classes)
        if self.rule == "last":
            return last_labels(cls, starts, window)
        return majority_labels(cls, starts, window, self.n_classes)


def event_truth(labels: np.ndarray, positive: int) -> np.ndarray:
    """1 where a window is of class ``positive``, 0 where of another class, -1 where ``IGNORED``
    (int8): what chunkfit.core.metrics.BinaryMetrics takes, skipping the -1.

    Example: labels [0, 1, -1, 2], positive 1 -> [0, 1, -1, 0].
    """
    lab = np.asarray(labels)
    return np.where(lab == IGNORED, -1, lab == positive).astype(np.int8)


def class_counts(
    labeller: Labeller, ranges: np.ndarray, window: int, stride: int, ignored: bool = False
) -> np.ndarray:
    """Windows of each class index in ``ranges``, labelled a bounded number at a time; with
    ``ignored``, one more entry at the end: the windows labelled ``IGNORED``."""
    counts = np.zeros(labeller.n_classes + 1, dtype=np.int64)
    for a, b in np.asarray(ranges, dtype=np.int64).reshape(-1, 2):
        n = count_windows(int(b - a), window, stride)
        for k0 in range(0, n, _PIECE):
            m = min(_PIECE, n - k0)
            lo = int(a) + k0 * stride
            starts = np.arange(m, dtype=np.int64) * stride
            labels = labeller.labels(lo, lo + (m - 1) * stride + window, starts, window)
            # IGNORED (-1) lands in the extra last bin
            counts += np.bincount(labels % (labeller.n_classes + 1), minlength=counts.size)
    return counts if ignored else counts[:-1]
