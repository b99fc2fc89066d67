"""``chunkfit evaluate`` and ``chunkfit predict`` in real subprocesses: reports, files, refusals."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from scoring_support import WINDOW, Trained, listing, run_cli_many, segmented_store
from support import error_line, make_store, run_cli

import chunkfit

pytestmark = pytest.mark.slow


# -- commands that succeed ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def done(
    runs: Trained, segmented: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Each successful command once, two at a time; results and folders by name."""
    root = tmp_path_factory.mktemp("cli-done")
    shutil.copytree(runs.run, root / "run")
    quiet = segmented_store(root / "quiet.zarr", events=False)
    commands = {
        "text": ["evaluate", root / "run", segmented, "--chunk", "300"],
        "json": ["evaluate", runs.run, quiet, "--json", "--plot", root / "quiet.png"],
        "predict": [
            "predict",
            runs.run,
            segmented,
            "--out",
            root / "scores.h5",
            "--events-out",
            root / "events.csv",
        ],
    }
    return {"root": root, "quiet": quiet, **run_cli_many(commands)}


def test_evaluate_prints_a_table_of_every_figure(done: dict[str, Any]) -> None:
    labels = [
        line.split()[0] for line in done["text"].stdout.splitlines() if not line.startswith(" ")
    ]
    assert labels == [
        "scoring",
        "run",
        "model",
        "store",
        "threshold",
        "events",
        "event",
        "false",
        "time",
        "PR-AUC",
        "precision",
        "recall",
        "F1",
        "ROC-AUC",
        "loss",
        "confusion",
        "accuracy",
        "plot",
    ]


def test_evaluate_table_shows_the_library_figures(
    done: dict[str, Any], runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    result = chunkfit.evaluate(runs.run, segmented, plot=tmp_path / "eval.png")
    lines = {
        line.split()[0]: line.split()[1]
        for line in done["text"].stdout.splitlines()
        if not line.startswith(" ")
    }
    shown = [lines[k] for k in ("loss", "accuracy", "recall", "ROC-AUC")]
    expected = [
        f"{result['loss']:.4f}",
        f"{100 * result['accuracy']:.2f}%",
        f"{100 * result['recall']:.2f}%",
        f"{result['roc_auc']:.4f}",
    ]
    assert shown == expected


def test_evaluate_writes_eval_png_into_the_run_folder_by_default(done: dict[str, Any]) -> None:
    assert (done["root"] / "run" / "eval.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluate_json_equals_the_library_result(
    done: dict[str, Any], runs: Trained, tmp_path: Path
) -> None:
    expected = chunkfit.evaluate(runs.run, done["quiet"], plot=tmp_path / "eval.png")
    result = json.loads(done["json"].stdout)
    figures = (
        "windows",
        "loss",
        "accuracy",
        "confusion",
        "false_alarms",
        "events",
        "event_found",
    )
    assert {k: result[k] for k in figures} == {k: expected[k] for k in figures}


def refuse_nan(token: str) -> None:
    raise ValueError(f"not JSON: {token}")


def test_evaluate_json_gives_null_for_figures_without_a_value(done: dict[str, Any]) -> None:
    # The store's event markers are empty: no event window, so no area, recall or coverage.
    result = json.loads(done["json"].stdout, parse_constant=refuse_nan)
    assert [result[k] for k in ("roc_auc", "pr_auc", "recall", "event_recall")] == [None] * 4


@pytest.mark.parametrize("name", ["text", "json", "predict"])
def test_successful_command_exits_0_with_nothing_on_stderr(done: dict[str, Any], name: str) -> None:
    result = done[name]
    assert (result.returncode, result.stderr) == (0, "")


def test_predict_says_what_it_wrote(done: dict[str, Any]) -> None:
    root = done["root"]
    detections = len((root / "events.csv").read_text().splitlines()) - 1
    threshold = json.loads((done["root"] / "run" / "run.json").read_text())["threshold"]["value"]
    assert done["predict"].stdout.splitlines() == [
        f"threshold {threshold:.4g} (chosen on the run's validation split (event-f1))",
        f"scored {985 + 1175:,} windows into {root / 'scores.h5'}; {detections:,} detection(s) in "
        f"{root / 'events.csv'}",
    ]


def test_predict_writes_scores_equal_to_the_library(
    done: dict[str, Any], runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    import h5py

    chunkfit.predict(runs.run, segmented, tmp_path / "scores.zarr")
    with h5py.File(done["root"] / "scores.h5", "r") as f:
        np.testing.assert_array_equal(
            f["scores"][:], zarr.open_group(str(tmp_path / "scores.zarr"), mode="r")["scores"][:]
        )


# -- refusals: one line, non-zero exit, nothing written --------------------------------------------


@dataclasses.dataclass(frozen=True)
class Refusal:
    result: subprocess.CompletedProcess[str]
    expected: str
    exit_code: int
    folder: Path
    before: dict[str, bytes]


def other_store(path: Path, channels: list[str], samples: int = 200) -> Path:
    return make_store(
        path, np.zeros((samples, len(channels)), np.float32), channels=channels, rate=1.0
    )


Case = Callable[[Path, Path], tuple[list[Any], str, int]]
SAME_CHANNELS = (
    "score a store ingested with the same channels (--columns), or map them with --channels "
    "RUN=STORE,..."
)


def run_without_model(f: Path, store: Path) -> tuple[list[Any], str, int]:
    (f / "unfinished").mkdir()
    return (
        ["predict", f / "unfinished", store, "--out", f / "s.zarr"],
        f"{f / 'unfinished'}: the run folder has no model.keras (training did not finish?); pass a "
        "finished run",
        1,
    )


def missing_run(f: Path, store: Path) -> tuple[list[Any], str, int]:
    return ["evaluate", f / "nope", store], f"{f / 'nope'}: no such run folder or .keras file", 1


def keras_file_that_is_not_one(f: Path, store: Path) -> tuple[list[Any], str, int]:
    (f / "model.keras").write_text("not a model")
    return (
        ["evaluate", f / "model.keras", store],
        f"{f / 'model.keras'}: not a .keras model (a .keras file is a zip archive, this file is "
        "not)",
        1,
    )


def other_channel_count(f: Path, store: Path) -> tuple[list[Any], str, int]:
    two = other_store(f / "two.zarr", ["x", "y"])
    return (
        ["predict", f / "run", two, "--out", f / "s.zarr"],
        f"{two}: channels ['x', 'y'] differ from the training store's ['x']; " + SAME_CHANNELS,
        1,
    )


def channels_naming_no_run_channel(f: Path, store: Path) -> tuple[list[Any], str, int]:
    other = other_store(f / "y.zarr", ["y"])
    return (
        ["evaluate", f / "run", other, "--channels", "q=y"],
        "--channels: the run's channels are ['x'] (no ['q']); pair each with a store channel, "
        "RUN=STORE",
        2,
    )


def window_longer_than_segments(f: Path, store: Path) -> tuple[list[Any], str, int]:
    short = make_store(
        f / "short.zarr",
        np.zeros((40, 1), np.float32),
        segments=[(0, 15), (15, 25), (25, 40)],
        channels=["x"],
        rate=1.0,
    )
    return (
        ["predict", f / "run", short, "--out", f / "s.zarr"],
        f"{short}: window {WINDOW} is longer than every segment (longest 15 samples); no window "
        "fits",
        1,
    )


def output_exists(f: Path, store: Path) -> tuple[list[Any], str, int]:
    (f / "s.h5").write_bytes(b"mine")
    return (
        ["predict", f / "run", store, "--out", f / "s.h5"],
        f"{f / 's.h5'}: already exists; pass --overwrite to replace it",
        1,
    )


def events_output_exists(f: Path, store: Path) -> tuple[list[Any], str, int]:
    (f / "events.csv").write_text("mine\n")
    return (
        ["predict", f / "run", store, "--out", f / "s.zarr", "--events-out", f / "events.csv"],
        f"{f / 'events.csv'}: already exists; pass --overwrite to replace it",
        1,
    )


def threshold_above_one(f: Path, store: Path) -> tuple[list[Any], str, int]:
    return (
        ["evaluate", f / "run", store, "--threshold", "1.5"],
        "--threshold must be in [0, 1] (received 1.5)",
        2,
    )


CASES: dict[str, Case] = {
    case.__name__: case
    for case in [
        run_without_model,
        missing_run,
        keras_file_that_is_not_one,
        other_channel_count,
        channels_naming_no_run_channel,
        window_longer_than_segments,
        output_exists,
        events_output_exists,
        threshold_above_one,
    ]
}


@pytest.fixture(scope="module")
def refusals(
    runs: Trained, segmented: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Refusal]:
    """Every bad command once, each in its own folder holding a copy of the run; two at a time."""
    prepared = {}
    for name, case in CASES.items():
        folder = tmp_path_factory.mktemp(name)
        shutil.copytree(runs.run, folder / "run")
        args, expected, code = case(folder, segmented)
        prepared[name] = (folder, args, expected, code, listing(folder))
    results = run_cli_many({name: p[1] for name, p in prepared.items()})
    return {
        name: Refusal(results[name], f"chunkfit: error: {p[2]}", p[3], p[0], p[4])
        for name, p in prepared.items()
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_prints_one_line_naming_the_problem(
    refusals: dict[str, Refusal], name: str
) -> None:
    assert error_line(refusals[name].result) == refusals[name].expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_exits_non_zero(refusals: dict[str, Refusal], name: str) -> None:
    assert refusals[name].result.returncode == refusals[name].exit_code


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_writes_nothing(refusals: dict[str, Refusal], name: str) -> None:
    assert listing(refusals[name].folder) == refusals[name].before


# -- a module:function model with a custom loss and a custom layer ---------------------------------

CUSTOM_MODELS = '''
import keras
from keras import layers, ops


def focal(y_true, y_pred):
    """A loss Keras cannot find by name: a plain function of this module."""
    p = ops.sum(y_true * y_pred, axis=-1)
    return -ops.mean((1.0 - p) ** 2 * ops.log(ops.clip(p, 1e-7, 1.0)))


class Doubled(layers.Layer):
    """A custom layer, not registered with Keras."""

    def call(self, x):
        return 2.0 * x


def build(window, n_channels, n_classes):
    model = keras.Sequential([keras.Input((window, n_channels)), Doubled(),
                              layers.Conv1D(8, 5, activation="relu"), layers.GlobalMaxPooling1D(),
                              layers.Dense(n_classes, activation="softmax")])
    model.compile(optimizer="adam", loss=focal, metrics=["accuracy"])
    return model
'''


@pytest.fixture(scope="module")
def custom_run(runs: Trained, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("custom")
    (root / "custom_models.py").write_text(CUSTOM_MODELS)
    result = run_cli(
        "train",
        runs.store,
        "--model",
        "custom_models:build",
        "--window",
        str(WINDOW),
        "--epochs",
        "1",
        "--chunk",
        "512",
        "--out",
        "run",
        cwd=root,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return root


def test_evaluate_scores_a_module_function_run_with_a_custom_loss_and_layer(
    custom_run: Path, runs: Trained
) -> None:
    result = run_cli("evaluate", "run", runs.store, "--json", cwd=custom_run)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["windows"] > 0 and 0.0 <= report["pr_auc"] <= 1.0
    assert "custom objects of custom_models" in report["model_loaded"]


def test_predict_scores_a_module_function_run_with_a_custom_loss_and_layer(
    custom_run: Path, runs: Trained
) -> None:
    result = run_cli("predict", "run", runs.store, "--out", "scores.zarr", cwd=custom_run)
    assert result.returncode == 0, result.stderr
    scores = np.asarray(zarr.open_group(str(custom_run / "scores.zarr"), mode="r")["scores"][:])
    assert np.isfinite(scores[: scores.size - WINDOW + 1]).all()
