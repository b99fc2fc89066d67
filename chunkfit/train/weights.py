"""Rare events: class weights with Keras's ``class_weight`` meaning, counted on the training split.

``--class-weight`` is ``auto`` (the default: ``balanced`` when the rarest class holds under
``RARE_SHARE`` of the training windows, else none), ``balanced`` (class c weighs n / (k * n_c), as
scikit-learn and Keras's own examples do), ``none``, or explicit ``0:1,1:40`` (class value: weight;
classes not named weigh 1). Each training window's loss and metric updates are weighted by its
class, in every batch (chunkfit.train.tensorflow.pipeline gathers the weights with the labels);
validation is not weighted, as in Keras's ``fit``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..config import parse_class_weight
from ..core.labels import Labeller, class_counts
from ..errors import UsageError

RARE_SHARE = 0.05


@dataclasses.dataclass(frozen=True)
class ClassWeights:
    """What the run weighs each class by (``weights`` None: unweighted), and why."""

    setting: str
    counts: tuple[int, ...]  # training windows per class index
    weights: tuple[float, ...] | None
    notice: str | None = None  # a choice made for the user, said on the run's first line

    def to_dict(self, classes: list[int]) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "train_windows": {str(c): n for c, n in zip(classes, self.counts, strict=True)},
            "weights": None
            if self.weights is None
            else {str(c): w for c, w in zip(classes, self.weights, strict=True)},
        }


def class_weights(
    setting: str, labeller: Labeller, ranges: np.ndarray, window: int, stride: int
) -> ClassWeights:
    """The run's class weights from its ``--class-weight`` setting and the training split's
    counts."""
    parsed = parse_class_weight(setting)
    counts = class_counts(labeller, ranges, window, stride)
    classes = labeller.classes
    if isinstance(parsed, dict):
        unknown = sorted(set(parsed) - set(classes))
        if unknown:
            raise UsageError(
                f"--class-weight names class(es) {unknown}, but the run's classes are {classes}"
            )
        return ClassWeights(
            setting, tuple(map(int, counts)), tuple(float(parsed.get(c, 1.0)) for c in classes)
        )
    if parsed == "none":
        return ClassWeights(setting, tuple(map(int, counts)), None)
    total, k = int(counts.sum()), len(classes)
    balanced = tuple(total / (k * int(n)) if n else 1.0 for n in counts)
    if parsed == "balanced":
        return ClassWeights(setting, tuple(map(int, counts)), balanced)
    rarest = int(np.argmin(counts))
    share = counts[rarest] / max(total, 1)
    if share >= RARE_SHARE:
        return ClassWeights(setting, tuple(map(int, counts)), None)
    notice = (
        f"class {classes[rarest]} holds {100 * share:.2f}% of training windows: weighted "
        f"{balanced[rarest]:.0f}x; --class-weight none to turn off"
    )
    return ClassWeights(setting, tuple(map(int, counts)), balanced, notice)
