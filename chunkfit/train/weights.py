"""Rare events: class weights with Keras's ``class_weight`` meaning, counted on the training split,
and the one line that says how a run balances its classes.

``--class-weight`` is ``auto`` (the default: ``balanced`` when the rarest class holds under
``RARE_SHARE`` of an epoch's training windows, else none), ``balanced`` (class c weighs
n / (k * n_c), as scikit-learn and Keras's own examples do), ``balanced:max=M`` (the same, no
weight above M), ``none``, or explicit ``0:1,1:40`` (class value: weight; classes not named weigh
1). The counts are those one epoch trains: with ``--oversample`` (chunkfit.core.balance) the
rarest class's repeats count, so a class oversampled to a quarter of the epoch is not weighted
again under ``auto``. Each training window's loss and metric updates are weighted by its class,
in every batch (the engines gather the weights with the labels); validation is not weighted, as in
Keras's ``fit``. ``--loss focal`` (Keras's ``CategoricalFocalCrossentropy``) is the third way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import parse_class_weight
from ..core.balance import Balance
from ..errors import UsageError

RARE_SHARE = 0.05

# Short loss names chunkfit takes besides Keras's own (chunkfit.train.models compiles with them).
LOSS_ALIASES = {"focal": "categorical_focal_crossentropy"}


def keras_loss(loss: str | None) -> str | None:
    """The Keras name of ``--loss`` (``focal`` -> ``categorical_focal_crossentropy``)."""
    return LOSS_ALIASES.get(loss, loss) if loss is not None else None


@dataclasses.dataclass(frozen=True)
class ClassWeights:
    """What the run weighs each class by (``weights`` None: unweighted), and why."""

    setting: str
    counts: tuple[int, ...]  # windows per class index one epoch trains
    weights: tuple[float, ...] | None
    notice: str | None = None  # how the run balances a rare class, said on the run's first line
    method: str = "none"  # oversample, weights, capped weights, focal loss (joined by +), none

    def to_dict(self, classes: list[int]) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "train_windows": {str(c): n for c, n in zip(classes, self.counts, strict=True)},
            "weights": None
            if self.weights is None
            else {str(c): w for c, w in zip(classes, self.weights, strict=True)},
        }

    def balance_info(self) -> dict[str, Any]:
        """How the run balances its classes, for run.json's ``balance``."""
        return {"method": self.method}


def class_weights(
    setting: str, classes: list[int], balance: Balance, loss: str | None = None
) -> ClassWeights:
    """The run's class weights from its ``--class-weight`` setting and one epoch's counts
    (``balance``: the training split's, with ``--oversample``'s repeats), and the line naming how
    the run balances its rarest class when that class is rare."""
    parsed = parse_class_weight(setting)
    counts = balance.epoch_counts()
    total, k = sum(counts), len(classes)
    if isinstance(parsed, dict):
        unknown = sorted(set(parsed) - set(classes))
        if unknown:
            raise UsageError(
                f"--class-weight names class(es) {unknown}, but the run's classes are {classes}"
            )
        weights: tuple[float, ...] | None = tuple(float(parsed.get(c, 1.0)) for c in classes)
    elif parsed == "none":
        weights = None
    else:
        weights = tuple(total / (k * n) if n else 1.0 for n in counts)
        if isinstance(parsed, float):
            weights = tuple(min(w, parsed) for w in weights)
        elif parsed == "auto" and min(counts) / max(total, 1) >= RARE_SHARE:
            weights = None
    notice, method = _notice(setting, classes, balance, weights, loss)
    return ClassWeights(setting, counts, weights, notice, method)


def _notice(
    setting: str,
    classes: list[int],
    balance: Balance,
    weights: tuple[float, ...] | None,
    loss: str | None,
) -> tuple[str | None, str]:
    """The balancing method's name (run.json) and, when the rarest class holds under
    ``RARE_SHARE`` of the training windows, the run's first line naming it.

    Example: ``class 1 holds 0.21% of training windows: repeated 159x per epoch to 25% of it
    (--oversample 0.25; 0 to turn off)``.
    """
    rare = balance.rare
    share = balance.counts[rare] / max(sum(balance.counts), 1)
    ways, methods = [], []
    if balance.repeat > 1:
        epoch = balance.epoch_counts()
        ways.append(
            f"repeated {balance.repeat}x per epoch to {100 * epoch[rare] / sum(epoch):.0f}% of "
            f"it (--oversample {balance.share:g}; 0 to turn off)"
        )
        methods.append("oversample")
    if weights is not None and max(weights) != min(weights):
        ways.append(f"weighted {weights[rare]:.0f}x (--class-weight {setting}; none to turn off)")
        methods.append("capped weights" if setting.startswith("balanced:max=") else "weights")
    if keras_loss(loss) == LOSS_ALIASES["focal"]:
        ways.append("focal loss")
        methods.append("focal loss")
    method = " + ".join(methods) or "none"
    if share >= RARE_SHARE:
        return None, method
    if not ways:
        ways.append("not balanced (--oversample 0.25 or --class-weight balanced to balance it)")
    left = (
        f"; {balance.ignored:,} windows with a marker near an edge left out (--label-margin)"
        if balance.ignored
        else ""
    )
    return (
        f"class {classes[rare]} holds {100 * share:.2f}% of training windows: "
        f"{', '.join(ways)}{left}",
        method,
    )
