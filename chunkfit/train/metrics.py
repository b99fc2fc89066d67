"""The epoch metrics chunkfit compiles, and the order epoch lines and history.csv show them in.

Accuracy flatters a detector of rare events (99.8% for one that never fires), so a two-class
model (class 1 the event) is compiled with Keras's own metrics of the event class first:

- ``pr_auc``: ``keras.metrics.AUC(curve="PR", multi_label=True, label_weights=[0, 1])``, the
  area under the precision-recall curve of class 1 alone (the label weights drop class 0 from
  the average);
- ``precision`` and ``recall``: ``keras.metrics.Precision/Recall(class_id=1)`` at 0.5;
- ``f1``: 2PR / (P + R) of those two, added to the logs (a Keras ``F1Score`` logs one value per
  class, which neither history.csv nor a callback's ``monitor`` can hold);

then, with event markers, the epoch's validation figures at the threshold chosen on the split
(``val_threshold``, ``val_event_f1``, ``val_false_alarms_per_hour``:
chunkfit.train.thresholds), the loss, any other metric, and accuracy last. Training figures are
weighted by the class weights, as Keras weighs metrics by ``fit(class_weight=...)``; validation
figures are not.
"""

from __future__ import annotations

from typing import Any

LEAD = (
    "pr_auc",
    "precision",
    "recall",
    "f1",
    "threshold",
    "event_f1",
    "false_alarms_per_hour",
    "false_alarms",
    "loss",
)
LAST = ("accuracy",)


def compiled_metrics(classes: int) -> list[Any]:
    """Fresh metric objects for ``model.compile``: the event class's first when there are two
    classes."""
    import keras

    if classes != 2:
        return ["accuracy"]
    pr_auc = keras.metrics.AUC(
        curve="PR", multi_label=True, label_weights=[0.0, 1.0], name="pr_auc"
    )
    # Keras 3.15's AUC keeps label_weights as a tensor and its get_config returns that tensor, which
    # from_config cannot read back: a model.keras saved compiled with it fails to load. A list
    # gives the same result() and round-trips.
    pr_auc.label_weights = [0.0, 1.0]
    return [
        pr_auc,
        keras.metrics.Precision(class_id=1, name="precision"),
        keras.metrics.Recall(class_id=1, name="recall"),
        "accuracy",
    ]


def with_f1(logs: dict[str, float]) -> dict[str, float]:
    """``logs`` with ``f1`` from its ``precision`` and ``recall`` (when both are there), in display
    order."""
    out = dict(logs)
    if "precision" in out and "recall" in out and "f1" not in out:
        p, r = out["precision"], out["recall"]
        out["f1"] = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return ordered(out)


def ordered(logs: dict[str, Any]) -> dict[str, Any]:
    """The event class's figures first, then the loss, other metrics, and accuracy last; training
    before validation (``val_``). Keras hands callbacks its logs sorted by name: this undoes
    that."""

    def rank(key: str) -> tuple[bool, int, int]:
        val = key.startswith("val_")
        base = key[4:] if val else key
        if base in LEAD:
            return val, 0, LEAD.index(base)
        return (val, 2, LAST.index(base)) if base in LAST else (val, 1, 0)

    return dict(sorted(logs.items(), key=lambda kv: rank(kv[0])))


# The figures of an epoch's short line, by log name (without ``val_``) and label: the validation
# split's when there is one, else training's. history.csv, run.json and ``--verbose`` hold them all.
SHORT = (
    ("event_f1", "event F1"),
    ("pr_auc", "PR-AUC"),
    ("false_alarms_per_hour", "false alarms/h"),
    ("false_alarms", "false alarms"),
)


def epoch_summary(logs: dict[str, float]) -> str:
    """An epoch's few figures that matter, for a line that fits a terminal of 100 columns: the
    training loss, then the validation split's ``SHORT`` figures after ``val:``
    (training's own without a split); accuracy where the model has no event class figures.

    ``{"loss": 0.04, "val_loss": 0.02, "val_event_f1": 0.9, "val_pr_auc": 0.99, ...}`` ->
    ``"loss 0.0400  val: event F1 0.9000  PR-AUC 0.9900  ..."``.
    """
    parts = [f"loss {logs['loss']:.4f}"] if "loss" in logs else []
    prefix = "val_" if any(k.startswith("val_") for k in logs) else ""
    figures = [(label, logs[prefix + name]) for name, label in SHORT if prefix + name in logs]
    if not any(label == "PR-AUC" for label, _ in figures) and prefix + "accuracy" in logs:
        figures.insert(0, ("accuracy", logs[prefix + "accuracy"]))
    shown = [f"{label} {_figure(label, value)}" for label, value in figures]
    if prefix and shown:
        shown[0] = "val: " + shown[0]
    return "  ".join([*parts, *shown])


def _figure(label: str, value: float) -> str:
    if label.startswith("false alarms"):
        return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return f"{value:.4f}"
