"""evaluate() on small stores against a brute-force evaluation of every window."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
from scoring_support import (
    LABEL_VALUES,
    STRIDE,
    WINDOW,
    Trained,
    all_windows,
    any_event,
    exact_average_precision,
    exact_roc_auc,
    keras_model,
    labelled_run,
    labelled_signal,
    merge_runs,
    most_pairs,
    segmented_store,
    separating_threshold,
)
from support import make_store

import chunkfit
from chunkfit.errors import IncompatibleError, RunError, UsageError, WindowError

pytestmark = pytest.mark.slow


def brute_force(run: Path, store_path: Path, stride: int) -> tuple[dict[str, Any], float]:
    """Every figure of evaluate() computed from all windows at once, and the threshold used."""
    w = all_windows(keras_model(run), store_path, WINDOW, stride)
    with chunkfit.open_store(store_path) as store:
        events, n_samples, rate = store.events, store.n_samples, float(store.sample_rate or "nan")
    score = w.probs[:, 1]
    # Sparse positive windows: at the median, overlapping windows merge into a few long events.
    threshold = separating_threshold(score, (0.95, 0.99))
    truth = any_event(w.starts, WINDOW, events)
    found = score.astype(np.float64) >= threshold
    tp, fp = int(np.sum(truth & found)), int(np.sum(~truth & found))
    fn, tn = int(np.sum(truth & ~found)), int(np.sum(~truth & ~found))
    onehot = np.eye(2, dtype=np.float32)[truth.astype(int)]
    runs = merge_runs(w.starts, w.segments, score, WINDOW, stride, threshold)
    peaks = [r.peak for r in runs]  # a detection stands at its peak
    matched = most_pairs(events.tolist(), peaks, WINDOW // 2)  # default tolerance: half a window
    false_alarms = len(runs) - matched
    hours = n_samples / rate / 3600
    figures = {
        "windows": w.starts.size,
        "loss": float(
            np.mean(
                keras.ops.convert_to_numpy(keras.losses.categorical_crossentropy(onehot, w.probs))
            )
        ),
        "accuracy": (tp + tn) / w.starts.size,
        "precision": tp / (tp + fp),
        "recall": tp / (tp + fn),
        "f1": 2 * tp / (2 * tp + fp + fn),
        "roc_auc": exact_roc_auc(truth, score),
        "pr_auc": exact_average_precision(truth, score),
        "confusion": {"tn": tn, "fp": fp, "fn": fn, "tp": tp},
        "events": events.size,
        "event_found": matched,
        "event_recall": matched / events.size,
        "event_precision": matched / len(runs),
        "event_f1": 2 * matched / (events.size + len(runs)),
        "detections": len(runs),
        "false_alarms": false_alarms,
        "false_alarms_per_hour": false_alarms / hours,
        "hours": hours,
    }
    return figures, threshold


@dataclasses.dataclass(frozen=True)
class Evaluation:
    result: dict[str, Any]
    expected: dict[str, Any]
    plot: Path


@pytest.fixture(scope="module", params=[1, STRIDE], ids=["stride-1", f"stride-{STRIDE}"])
def evaluation(
    request: pytest.FixtureRequest,
    runs: Trained,
    segmented: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Evaluation:
    """evaluate() in blocks of 200 windows on a store of three segments, and the brute force."""
    run = runs.run if request.param == 1 else runs.strided
    expected, threshold = brute_force(run, segmented, request.param)
    plot = tmp_path_factory.mktemp("plot") / "eval.png"
    result = chunkfit.evaluate(
        run, segmented, threshold=threshold, chunk=200, batch_size=64, plot=plot
    )
    return Evaluation(result, expected, plot)


# loss: Keras clips probabilities to [1e-7, 1 - 1e-7] in float32; the areas come from histograms
TOLERANCE = {"loss": {"rel": 1e-5}, "roc_auc": {"abs": 1e-3}, "pr_auc": {"abs": 1e-3}}


@pytest.mark.parametrize(
    "figure",
    [
        "windows",
        "loss",
        "accuracy",
        "precision",
        "recall",
        "f1",
        "roc_auc",
        "pr_auc",
        "events",
        "event_found",
        "event_recall",
        "event_precision",
        "event_f1",
        "detections",
        "false_alarms",
        "false_alarms_per_hour",
        "hours",
    ],
)
def test_figure_equals_the_brute_force_over_every_window(
    evaluation: Evaluation, figure: str
) -> None:
    expected = evaluation.expected[figure]
    assert evaluation.result[figure] == pytest.approx(
        expected, **TOLERANCE.get(figure, {"rel": 1e-12})
    )


def test_confusion_at_the_threshold_equals_counting_every_window(evaluation: Evaluation) -> None:
    assert evaluation.result["confusion"] == evaluation.expected["confusion"]


def test_two_classes_give_no_argmax_figures_beside_the_threshold_ones(
    evaluation: Evaluation,
) -> None:
    assert "argmax" not in evaluation.result


def test_event_figures_come_before_the_window_figures(evaluation: Evaluation) -> None:
    keys = list(evaluation.result)
    assert keys.index("event_f1") < keys.index("precision") < keys.index("pr_auc")


def test_time_errors_are_those_of_the_detections_within_tolerance(
    evaluation: Evaluation,
) -> None:
    result = evaluation.result
    assert 0 <= result["time_error_median_s"] <= result["time_error_p95_s"] <= result["tolerance_s"]


def test_the_run_has_both_kinds_of_detection_to_count(evaluation: Evaluation) -> None:
    # Guards the figures above against a vacuous pass: some detections hit an event, some do not.
    assert 0 < evaluation.expected["false_alarms"] < evaluation.expected["detections"]


def test_plot_is_written_as_a_png(evaluation: Evaluation) -> None:
    assert evaluation.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_result_reports_the_window_settings_read_from_the_run(
    evaluation: Evaluation, runs: Trained
) -> None:
    stride = evaluation.result["stride"]
    assert (evaluation.result["window"], evaluation.result["run"]) == (
        WINDOW,
        str(runs.run if stride == 1 else runs.strided),
    )


def test_span_matching_with_a_tolerance_equals_the_brute_force(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    w = all_windows(keras_model(runs.run), segmented, WINDOW, 1)
    with chunkfit.open_store(segmented) as store:
        events, rate = store.events, float(store.sample_rate or "nan")
    score = w.probs[:, 1]
    threshold = separating_threshold(score)
    detections = merge_runs(w.starts, w.segments, score, WINDOW, 1, threshold)
    tolerance = 3  # samples
    owner: dict[int, int] = {}  # detection -> marker, grown by augmenting paths

    def place(m: int, seen: set[int]) -> bool:
        for d, r in enumerate(detections):
            if r.start - tolerance <= events[m] <= r.end - 1 + tolerance and d not in seen:
                seen.add(d)
                if d not in owner or place(owner[d], seen):
                    owner[d] = m
                    return True
        return False

    found = sum(place(m, set()) for m in range(events.size))
    result = chunkfit.evaluate(
        runs.run,
        segmented,
        threshold=threshold,
        tolerance=tolerance / rate,
        match="span",
        plot=tmp_path / "eval.png",
    )
    assert (result["event_found"], result["detections"], result["match"]) == (
        found,
        len(detections),
        "span",
    )


def test_bare_keras_file_is_evaluated_with_stride_1(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    result = chunkfit.evaluate(runs.run / "model.keras", segmented, plot=tmp_path / "eval.png")
    assert (result["window"], result["stride"], result["windows"]) == (
        WINDOW,
        1,
        (1000 - 15) + (1190 - 15),
    )


def test_store_whose_events_make_no_positive_window_gives_nan_areas(
    runs: Trained, tmp_path: Path
) -> None:
    store = segmented_store(tmp_path / "quiet.zarr", events=False)
    result = chunkfit.evaluate(runs.run, store, plot=tmp_path / "eval.png")
    assert [math.isnan(result[k]) for k in ("roc_auc", "pr_auc", "recall", "event_recall")] == [
        True
    ] * 4


# -- per-sample labels ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return labelled_run(tmp_path_factory.getbasetemp())


def test_labels_map_to_the_runs_classes_when_the_store_lacks_one(
    labelled: Path, tmp_path: Path
) -> None:
    # The store holds classes -1 and 5 only; the model's outputs are -1, 0, 5.
    x, labels = labelled_signal(600, [-1, 5], seed=4)
    store = make_store(tmp_path / "two.zarr", x, labels=labels, rate=50.0, channels=["a"])
    w = all_windows(keras_model(labelled), store, WINDOW, 1)
    truth = np.searchsorted(LABEL_VALUES, labels[w.starts + WINDOW - 1])
    matrix = np.zeros((3, 3), dtype=int)
    np.add.at(matrix, (truth, np.argmax(w.probs, axis=1)), 1)
    result = chunkfit.evaluate(labelled, store, plot=tmp_path / "eval.png")
    assert result["argmax"]["confusion_matrix"] == matrix.tolist()


def test_store_with_a_single_label_class_is_evaluated(labelled: Path, tmp_path: Path) -> None:
    x, labels = labelled_signal(300, [0], seed=5)
    store = make_store(tmp_path / "one.zarr", x, labels=labels, rate=50.0, channels=["a"])
    result = chunkfit.evaluate(labelled, store, plot=tmp_path / "eval.png")
    assert result["windows"] == 300 - WINDOW + 1


def test_store_with_a_label_class_the_run_never_saw_is_refused(
    labelled: Path, tmp_path: Path
) -> None:
    x, labels = labelled_signal(300, [0, 7], seed=6)
    store = make_store(tmp_path / "other.zarr", x, labels=labels, rate=50.0, channels=["a"])
    with pytest.raises(
        IncompatibleError, match=r"label class\(es\) \[7\] .* run's classes \[-1, 0, 5\]"
    ):
        chunkfit.evaluate(labelled, store, plot=tmp_path / "eval.png")


# -- bad input ------------------------------------------------------------------------------------


def test_store_without_events_or_labels_is_refused(runs: Trained, tmp_path: Path) -> None:
    store = make_store(
        tmp_path / "plain.zarr", np.zeros((100, 1), np.float32), rate=1.0, channels=["x"]
    )
    with pytest.raises(
        WindowError,
        match="the run labels windows by event markers, but the store has none; evaluate needs a "
        "labelled store",
    ):
        chunkfit.evaluate(runs.run, store, plot=tmp_path / "eval.png")


def test_plot_in_a_missing_folder_is_refused_before_scoring(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    with pytest.raises(RunError, match="the output folder does not exist"):
        chunkfit.evaluate(runs.run, segmented, plot=tmp_path / "nowhere" / "eval.png")


@pytest.mark.parametrize(
    "setting",
    [{"chunk": 0}, {"batch_size": 0}, {"threshold": 1.5}, {"tolerance": -1.0}, {"match": "end"}],
)
def test_setting_out_of_range_is_refused(
    runs: Trained, segmented: Path, tmp_path: Path, setting: dict[str, Any]
) -> None:
    with pytest.raises(UsageError):
        chunkfit.evaluate(runs.run, segmented, plot=tmp_path / "eval.png", **setting)


def test_nothing_is_written_when_evaluation_is_refused(runs: Trained, tmp_path: Path) -> None:
    store = make_store(
        tmp_path / "plain.zarr", np.zeros((100, 1), np.float32), rate=1.0, channels=["x"]
    )
    with pytest.raises(WindowError):
        chunkfit.evaluate(runs.run, store, plot=tmp_path / "eval.png")
    assert not (tmp_path / "eval.png").exists()


# -- which windows are scored ---------------------------------------------------------------------


def test_on_the_training_store_evaluate_scores_the_validation_split_and_says_so(
    runs: Trained, tmp_path: Path
) -> None:
    result = chunkfit.evaluate(runs.run, runs.store, plot=tmp_path / "eval.png")
    split = json.loads((runs.run / "run.json").read_text())["split"]
    assert result["windows"] == split["validation_windows"]
    assert result["scored"].startswith("validation split of ")


def test_split_train_scores_the_training_windows_and_says_they_flatter(
    runs: Trained, tmp_path: Path
) -> None:
    result = chunkfit.evaluate(runs.run, runs.store, plot=tmp_path / "eval.png", split="train")
    split = json.loads((runs.run / "run.json").read_text())["split"]
    assert result["windows"] == split["train_windows"]
    assert "flatter" in result["scored"]


def test_split_all_scores_every_window_of_the_training_store(runs: Trained, tmp_path: Path) -> None:
    result = chunkfit.evaluate(runs.run, runs.store, plot=tmp_path / "eval.png", split="all")
    with chunkfit.open_store(runs.store) as s:
        assert result["windows"] == s.n_samples - WINDOW + 1


def test_another_store_is_scored_whole(runs: Trained, segmented: Path, tmp_path: Path) -> None:
    result = chunkfit.evaluate(runs.run, segmented, plot=tmp_path / "eval.png")
    assert result["scored"].endswith("(a store the run was not trained on)")


def test_a_split_of_another_store_is_refused(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    with pytest.raises(
        UsageError, match="--split validation names part of the run's training store"
    ):
        chunkfit.evaluate(runs.run, segmented, plot=tmp_path / "eval.png", split="validation")


def test_evaluate_uses_the_runs_threshold_unless_given_one(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    chosen = json.loads((runs.run / "run.json").read_text())["threshold"]["value"]
    assert chunkfit.evaluate(runs.run, segmented, plot=tmp_path / "a.png")["threshold"] == chosen
    assert (
        chunkfit.evaluate(runs.run, segmented, plot=tmp_path / "b.png", threshold=0.3)["threshold"]
        == 0.3
    )


def test_eval_plot_draws_no_event_where_no_signal_is_plotted() -> None:
    from chunkfit.score.evaluate import shown_events

    x = np.array([np.nan, 1.0, 2.0, np.nan, np.nan, 3.0], np.float32)
    assert shown_events(np.array([0, 2, 3, 5]), x).tolist() == [2, 5]
