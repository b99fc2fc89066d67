"""An epoch's short line (chunkfit.train.metrics.epoch_summary): the few figures that matter, the
validation split's after ``val:``, short enough for a terminal of 100 columns."""

from __future__ import annotations

from chunkfit.train.metrics import epoch_summary

EVENT_LOGS = {
    "pr_auc": 0.99,
    "precision": 0.95,
    "recall": 0.96,
    "f1": 0.955,
    "loss": 0.1114,
    "accuracy": 0.96,
    "val_pr_auc": 0.9997,
    "val_precision": 0.9934,
    "val_recall": 0.9847,
    "val_f1": 0.989,
    "val_threshold": 0.39,
    "val_event_f1": 0.9412,
    "val_false_alarms_per_hour": 120.0,
    "val_loss": 0.031,
    "val_accuracy": 0.9894,
}


def test_an_event_model_shows_the_loss_and_the_validation_splits_event_figures() -> None:
    assert epoch_summary(EVENT_LOGS) == (
        "loss 0.1114  val: event F1 0.9412  PR-AUC 0.9997  false alarms/h 120"
    )


def test_without_a_validation_split_the_training_figures_are_shown() -> None:
    logs = {k: v for k, v in EVENT_LOGS.items() if not k.startswith("val_")}
    assert epoch_summary(logs) == "loss 0.1114  PR-AUC 0.9900"


def test_without_a_sample_rate_false_alarms_are_a_count() -> None:
    logs = {k: v for k, v in EVENT_LOGS.items() if k != "val_false_alarms_per_hour"}
    logs["val_false_alarms"] = 3.0
    assert epoch_summary(logs).endswith("  PR-AUC 0.9997  false alarms 3")


def test_a_model_of_more_classes_shows_its_accuracy() -> None:
    logs = {"loss": 0.5, "accuracy": 0.8, "val_loss": 0.6, "val_accuracy": 0.75}
    assert epoch_summary(logs) == "loss 0.5000  val: accuracy 0.7500"


def test_a_long_epoch_line_fits_100_columns() -> None:
    logs = {**EVENT_LOGS, "val_false_alarms_per_hour": 9_999.0, "loss": 12.3456}
    assert len(f"epoch 10/10  {epoch_summary(logs)}") <= 100
