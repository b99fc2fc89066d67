"""Rare events with real training on both engines: oversampled epochs, the label margin, focal loss,
and the line that names how a run balances its classes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
from support import error_line, run_cli

import chunkfit
from chunkfit import FitOptions, StoreWriter
from chunkfit.core.plan import SplitPlan
from chunkfit.core.windows import IGNORED, span_labels, window_starts

pytestmark = pytest.mark.slow

WINDOW = 16
SAMPLES = 4_000
# 8 events; 6 in the training split [0, 3184): 96 of its 3,169 windows (3.03%) hold one, and 11
# repeats bring them to 96 * 11 / (3,073 + 96 * 11) = 25.6% of an oversampled epoch
EVENTS = np.array([150, 700, 1100, 1650, 2300, 2900, 3300, 3700])
FIT: dict[str, Any] = {
    "window": WINDOW,
    "chunk": 500,
    "mix": 2,
    "batch_size": 64,
    "epochs": 2,
    "validation": 0.2,
}


@pytest.fixture(scope="module")
def rare_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Noise with a bump of +3 at each of 8 event markers."""
    path = tmp_path_factory.mktemp("rare") / "rare.zarr"
    x = np.random.default_rng(5).normal(0, 1, SAMPLES).astype(np.float32)
    x[EVENTS] += 3.0
    with StoreWriter(path, channels=["x"], sample_rate=100.0, has_labels=False, append=False) as w:
        w.write(x[:, None])
        w.add_segment(0, SAMPLES)
        w.add_events(EVENTS)
        w.commit()
    return path


def labels_of(run: dict[str, Any], ranges: str, margin: int) -> np.ndarray:
    """Brute-force classes of the run's windows in ``ranges`` (train_ranges, validation_ranges)."""
    starts = np.concatenate([window_starts(a, b, WINDOW) for a, b in run["split"][ranges]]).astype(
        np.int64
    )
    return span_labels(starts, EVENTS, (0, WINDOW), margin)


class Batches(keras.callbacks.Callback):
    """Counts the training batches of each epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.per_epoch: list[int] = []

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.per_epoch.append(0)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.per_epoch[-1] += 1


@pytest.fixture(scope="module")
def oversampled(rare_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("oversampled") / "run"
    batches = Batches()
    chunkfit.fit(
        "baseline-cnn",
        rare_store,
        **FIT,
        oversample=0.25,
        steps_per_execution=1,
        callbacks=[batches],
        out=out,
    )
    return json.loads((out / "run.json").read_text()), batches


@pytest.mark.backends
def test_each_oversampled_epoch_trains_every_negative_once_and_every_positive_k_times(
    oversampled: Any,
) -> None:
    run, _ = oversampled
    labels = labels_of(run, "train_ranges", 0)
    k = run["balance"]["repeat"]
    expected = int((labels == 0).sum()) + k * int((labels == 1).sum())
    assert (k > 1, [e["train_windows"] for e in run["epochs"]]) == (True, [expected, expected])


@pytest.mark.backends
def test_an_oversampled_epoch_runs_the_batches_of_its_enlarged_groups(
    oversampled: Any, rare_store: Path
) -> None:
    _, batches = oversampled
    opts = FitOptions.from_keywords(**FIT, oversample=0.25, steps_per_execution=1)
    with chunkfit.open_store(rare_store) as store:
        plan = SplitPlan.of(store, opts).blocks(opts, FIT["chunk"])
        expected = [
            sum(-(-plan.group_windows(g) // FIT["batch_size"]) for g in plan.train_groups(e))
            for e in range(2)
        ]
    assert batches.per_epoch == expected


@pytest.mark.backends
def test_run_json_records_the_oversampling(oversampled: Any) -> None:
    run, _ = oversampled
    b = run["balance"]
    assert (b["method"], b["oversample"], b["class"], run["config"]["oversample"]) == (
        "oversample",
        0.25,
        1,
        0.25,
    )


@pytest.mark.backends
def test_oversampling_to_a_quarter_turns_auto_class_weights_off(oversampled: Any) -> None:
    run, _ = oversampled
    assert run["class_weight"]["weights"] is None


@pytest.fixture(scope="module")
def margined(rare_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("margined") / "run"
    chunkfit.fit("baseline-cnn", rare_store, **FIT, label_margin=3, out=out)
    return json.loads((out / "run.json").read_text()), out


@pytest.mark.backends
def test_windows_within_the_label_margin_are_left_out_of_training(margined: Any) -> None:
    run, _ = margined
    labels = labels_of(run, "train_ranges", 3)
    assert (
        run["balance"]["ignored_windows"],
        [e["train_windows"] for e in run["epochs"]],
    ) == (int((labels == IGNORED).sum()), [int((labels != IGNORED).sum())] * 2)


@pytest.mark.backends
def test_windows_within_the_label_margin_are_left_out_of_evaluate(
    margined: Any, rare_store: Path
) -> None:
    run, out = margined
    labels = labels_of(run, "validation_ranges", 3)
    report = chunkfit.evaluate(out, rare_store)
    assert (report["windows"], report["confusion"]["tp"] + report["confusion"]["fn"]) == (
        int((labels != IGNORED).sum()),
        int((labels == 1).sum()),
    )


@pytest.mark.backends
def test_the_margin_goes_to_run_json_with_the_window_settings(margined: Any) -> None:
    run, _ = margined
    assert run["config"]["windows"]["margin"] == 3


class Crash(Exception):
    """Stands in for a crash inside training."""


def crash_in(epoch: int, batch: int) -> Any:
    class CrashIn(keras.callbacks.Callback):
        def on_epoch_begin(self, e: int, logs: Any = None) -> None:
            self.epoch = e

        def on_train_batch_end(self, b: int, logs: Any = None) -> None:
            if (self.epoch, b) == (epoch, batch):
                raise Crash

    return CrashIn()


@pytest.mark.backends
def test_a_balanced_run_crashed_inside_an_epoch_resumes_to_the_uninterrupted_weights(
    rare_store: Path, tmp_path: Path
) -> None:
    settings = {
        **FIT,
        "mix": 1,
        "oversample": 0.25,
        "label_margin": 2,
        "deterministic": True,
        "steps_per_execution": 1,
        "checkpoint_every": 1,
    }
    whole = chunkfit.fit("baseline-cnn", rare_store, **settings, out=tmp_path / "whole")
    with pytest.raises(Crash):
        chunkfit.fit(
            "baseline-cnn",
            rare_store,
            **settings,
            callbacks=[crash_in(1, 25)],
            out=tmp_path / "crashed",
        )
    again = chunkfit.fit(
        "baseline-cnn", rare_store, **settings, out=tmp_path / "crashed", resume="resume"
    )
    resumes = json.loads((tmp_path / "crashed" / "run.json").read_text())["resumes"]
    same = all(
        np.array_equal(a, b)
        for a, b in zip(whole.model.get_weights(), again.model.get_weights(), strict=True)
    )
    assert ([(r["epoch"], r["position"] > 0) for r in resumes], same) == ([(1, True)], True)


@pytest.mark.backends
def test_the_first_line_names_the_oversampling(rare_store: Path, tmp_path: Path) -> None:
    result = run_cli(
        "train",
        rare_store,
        *_cli(FIT),
        "--epochs",
        "1",
        "--oversample",
        "0.25",
        "--out",
        tmp_path / "run",
    )
    first = (result.stdout + result.stderr).strip().splitlines()[0]
    assert (result.returncode, first) == (
        0,
        f"class 1 holds {_share()} of training windows: repeated 11x per epoch to 26% of it "
        "(--oversample 0.25; 0 to turn off)",
    )


@pytest.mark.backends
def test_focal_loss_trains_is_recorded_and_named_on_the_first_line(
    rare_store: Path, tmp_path: Path
) -> None:
    result = run_cli(
        "train",
        rare_store,
        *_cli(FIT),
        "--epochs",
        "1",
        "--loss",
        "focal",
        "--class-weight",
        "none",
        "--out",
        tmp_path / "run",
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    first = (result.stdout + result.stderr).strip().splitlines()[0]
    assert (result.returncode, first, run["config"]["loss"], run["balance"]["method"]) == (
        0,
        f"class 1 holds {_share()} of training windows: focal loss",
        "focal",
        "focal loss",
    )


def test_capped_weights_stop_at_the_cap(rare_store: Path, tmp_path: Path) -> None:
    chunkfit.fit(
        "baseline-cnn",
        rare_store,
        **{**FIT, "epochs": 1},
        class_weight="balanced:max=5",
        out=tmp_path / "run",
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (run["class_weight"]["weights"]["1"], run["balance"]["method"]) == (
        5.0,
        "capped weights",
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--oversample", "1.5"],
            "chunkfit: error: --oversample must be a share in [0, 1) of each epoch's windows for "
            "the rarest class, e.g. 0.25 (0: off) (received 1.5)",
        ),
        (
            ["--class-weight", "balanced:max=0.5"],
            "chunkfit: error: --class-weight must be auto, balanced, none or CLASS:WEIGHT pairs "
            "like 0:1,1:40, or balanced:max=M to cap the weights at M >= 1 (received "
            "'balanced:max=0.5')",
        ),
        (
            ["--label", "last", "--label-margin", "3"],
            "chunkfit: error: --label-margin applies to event markers (--label any-event, "
            "event-last=K, event-in=A:B), not to --label last; drop --label-margin",
        ),
        (
            ["--label", "event-in=12:4"],
            "chunkfit: error: --label event-in=12:4 must name samples inside the window: 0 <= A < "
            "B <= window for event-in=A:B, 1 <= K <= window for event-last=K (received window=16); "
            "use numbers within --window",
        ),
    ],
)
def test_a_balancing_option_out_of_range_is_one_line(
    rare_store: Path, tmp_path: Path, args: list[str], line: str
) -> None:
    result = run_cli("train", rare_store, "--window", "16", *args, "--out", tmp_path / "run")
    assert (result.returncode != 0, error_line(result), (tmp_path / "run").exists()) == (
        True,
        line,
        False,
    )


@pytest.mark.backends
def test_an_online_rule_labels_a_window_positive_only_for_a_recent_marker(
    rare_store: Path, tmp_path: Path
) -> None:
    chunkfit.fit(
        "baseline-cnn", rare_store, **{**FIT, "epochs": 1}, label="event-last=4", out=tmp_path / "r"
    )
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    starts = np.concatenate([window_starts(a, b, WINDOW) for a, b in run["split"]["train_ranges"]])
    recent = span_labels(starts.astype(np.int64), EVENTS, (WINDOW - 4, WINDOW))
    assert run["class_weight"]["train_windows"] == {
        "0": int((recent == 0).sum()),
        "1": int((recent == 1).sum()),
    }


def _share() -> str:
    return f"{100 * 96 / 3169:.2f}%"


def _cli(fit: dict[str, Any]) -> list[str]:
    return [
        "--window",
        str(fit["window"]),
        "--chunk",
        str(fit["chunk"]),
        "--mix",
        str(fit["mix"]),
        "--batch-size",
        str(fit["batch_size"]),
        "--validation",
        str(fit["validation"]),
    ]
