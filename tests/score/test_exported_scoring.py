"""predict and evaluate with an exported model (chunkfit export): scored in its own runtime, with
the run's outputs.

One module fixture exports the session's small run (window 16, stride 1) as LiteRT float32,
ONNX, SavedModel, LiteRT int8 and an int8 C array, and a picker run as LiteRT, through chunkfit's
exporter; the run itself (Keras) is the reference every export is scored against.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from scoring_support import WINDOW, Trained
from support import cli_env, error_line, run_cli

import chunkfit

pytestmark = pytest.mark.slow

FLOAT = ("litert", "onnx", "saved_model")
NAMES = {"litert": "model.tflite", "onnx": "model.onnx", "saved_model": "saved_model"}
# int8: one output step is 1/256 of a probability; input rounding adds a few more. The bound
# tested: every score within 0.05 of the float model's, on average within one output step.
INT8_MAX = 0.05
INT8_MEAN = 1 / 256
ROWS = ("start_sample", "end_sample", "peak_sample", "segment")


@dataclasses.dataclass(frozen=True)
class Scored:
    scores: np.ndarray
    detections: list[dict[str, str]]
    report: chunkfit.PredictReport


@dataclasses.dataclass(frozen=True)
class Exports:
    store: Path  # the run's training store
    scored: Path  # a store of three segments to predict on
    run: Path
    files: dict[str, Path]  # litert, onnx, saved_model, int8, c-array
    keras: Scored  # the run's own predict on ``scored``
    keras_eval: dict[str, Any]  # the run's own evaluate on its validation split


def predicted(run: Path, store: Path, folder: Path) -> Scored:
    folder.mkdir()
    report = chunkfit.predict(
        run, store, folder / "scores.zarr", events_out=folder / "events.csv", chunk=500
    )
    with (folder / "events.csv").open() as f:
        rows = list(csv.DictReader(f))
    return Scored(
        np.asarray(zarr.open_group(str(folder / "scores.zarr"))["scores"][:]), rows, report
    )


@pytest.fixture(scope="module")
def exports(runs: Trained, segmented: Path, tmp_path_factory: pytest.TempPathFactory) -> Exports:
    from chunkfit.export import export_run

    folder = tmp_path_factory.mktemp("exported")
    files = {fmt: export_run(runs.run, fmt, out=folder / name).path for fmt, name in NAMES.items()}
    files["int8"] = export_run(
        runs.run, "litert", out=folder / "model-int8.tflite", quantize="int8"
    ).path
    files["c-array"] = export_run(runs.run, "c-array", out=folder / "model-int8.c").path
    return Exports(
        runs.store,
        segmented,
        runs.run,
        files,
        predicted(runs.run, segmented, folder / "keras"),
        chunkfit.evaluate(runs.run, runs.store, plot=None),
    )


@pytest.fixture(scope="module")
def picker(runs: Trained, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Scored]:
    """A picker run on the session's store exported as LiteRT, and the run's own predict."""
    from chunkfit.export import export_run

    folder = tmp_path_factory.mktemp("picker")
    common = {"window": WINDOW, "chunk": 512, "batch_size": 64, "epochs": 1, "validation": 0.1}
    chunkfit.fit("picker", runs.store, **common, out=folder / "run")
    exported = export_run(folder / "run", "litert", out=folder / "picker.tflite").path
    return exported, predicted(folder / "run", runs.store, folder / "keras")


def same_detections(a: list[dict[str, str]], b: list[dict[str, str]], tol: float) -> None:
    assert [[r[k] for k in ROWS] for r in a] == [[r[k] for k in ROWS] for r in b]
    peaks = np.asarray([float(r["peak_score"]) for r in a])
    assert np.abs(peaks - np.asarray([float(r["peak_score"]) for r in b])).max() <= tol


def largest_difference(a: np.ndarray, b: np.ndarray) -> float:
    assert np.array_equal(np.isnan(a), np.isnan(b))
    return float(np.nanmax(np.abs(a - b)))


@pytest.mark.parametrize("fmt", FLOAT)
def test_float_export_scores_equal_the_runs_own(exports: Exports, fmt: str, tmp_path: Path) -> None:
    got = predicted(exports.files[fmt], exports.scored, tmp_path / "out")
    assert largest_difference(got.scores, exports.keras.scores) <= 1e-5
    assert len(got.detections) > 0


@pytest.mark.parametrize("fmt", FLOAT)
def test_float_export_detects_what_the_run_detects(
    exports: Exports, fmt: str, tmp_path: Path
) -> None:
    got = predicted(exports.files[fmt], exports.scored, tmp_path / "out")
    same_detections(got.detections, exports.keras.detections, 1e-5)
    assert got.report.threshold == exports.keras.report.threshold


@pytest.mark.parametrize("fmt", FLOAT)
def test_float_export_evaluates_to_the_runs_event_figures(exports: Exports, fmt: str) -> None:
    got = chunkfit.evaluate(exports.files[fmt], exports.store, plot=None)
    want = exports.keras_eval
    events = [k for k in want if k.startswith("event") or k in ("detections", "false_alarms")]
    assert {k: got[k] for k in events} == {k: want[k] for k in events}
    assert got["scored"] == want["scored"]
    assert abs(got["pr_auc"] - want["pr_auc"]) <= 1e-5


def test_int8_export_scores_within_the_quantisation_bound(exports: Exports, tmp_path: Path) -> None:
    got = predicted(exports.files["int8"], exports.scored, tmp_path / "out")
    assert largest_difference(got.scores, exports.keras.scores) <= INT8_MAX
    assert float(np.nanmean(np.abs(got.scores - exports.keras.scores))) <= INT8_MEAN
    assert got.report.exported == "model-int8.tflite (LiteRT int8)"


def test_int8_threshold_above_its_highest_score_is_named(exports: Exports, tmp_path: Path) -> None:
    report = chunkfit.predict(
        exports.files["int8"], exports.scored, events_out=tmp_path / "ev.csv", threshold=0.999
    )
    assert report.detections == 0
    assert report.threshold_source == (
        "--threshold; above 0.996094, the highest score this quantised model gives, so nothing "
        "fires: pass --threshold 0.996 or lower"
    )


def test_int8_export_evaluates_on_the_runs_validation_split(exports: Exports) -> None:
    got = chunkfit.evaluate(exports.files["int8"], exports.store, plot=None)
    assert got["exported"] == "model-int8.tflite (LiteRT int8)"
    assert got["scored"] == exports.keras_eval["scored"]
    assert got["events"] == exports.keras_eval["events"]
    assert abs(got["pr_auc"] - exports.keras_eval["pr_auc"]) <= 0.05


def test_c_array_scores_as_the_int8_flatbuffer_it_holds(exports: Exports, tmp_path: Path) -> None:
    c_array = predicted(exports.files["c-array"], exports.scored, tmp_path / "c")
    flatbuffer = predicted(exports.files["int8"], exports.scored, tmp_path / "tflite")
    assert largest_difference(c_array.scores, flatbuffer.scores) == 0.0
    assert c_array.report.exported == "model-int8.c (LiteRT int8)"


def test_picker_export_scores_like_the_picker_run(
    runs: Trained, picker: tuple[Path, Scored], tmp_path: Path
) -> None:
    exported, keras = picker
    got = predicted(exported, runs.store, tmp_path / "out")
    assert largest_difference(got.scores, keras.scores) <= 1e-5
    same_detections(got.detections, keras.detections, 1e-5)
    assert got.report.exported == "picker.tflite (LiteRT float32)"


def test_follow_with_an_export_scores_as_predict_does(exports: Exports, tmp_path: Path) -> None:
    from chunkfit.config import FollowOptions

    report = chunkfit.follow(
        exports.files["litert"],
        exports.scored,
        tmp_path / "scores.zarr",
        events_out=tmp_path / "events.csv",
        options=FollowOptions(idle=0.2),
    )
    scores = np.asarray(zarr.open_group(str(tmp_path / "scores.zarr"))["scores"][:])
    assert largest_difference(scores, exports.keras.scores) <= 1e-5
    assert report.exported == "model.tflite (LiteRT float32)"


def test_predict_says_first_what_scores(exports: Exports, tmp_path: Path) -> None:
    result = run_cli(
        "predict", exports.files["int8"], exports.scored, "--events-out", tmp_path / "ev.csv"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "exported model-int8.tflite (LiteRT int8)"
    assert (tmp_path / "ev.csv").is_file()


def test_evaluate_says_first_what_scores(exports: Exports, tmp_path: Path) -> None:
    result = run_cli(
        "evaluate", exports.files["onnx"], exports.store, "--plot", tmp_path / "eval.png"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "exported     model.onnx (ONNX Runtime float32)"
    assert (tmp_path / "eval.png").is_file()


SCORE_WITHOUT_TENSORFLOW = """
import sys, chunkfit
for model in sys.argv[2:]:
    chunkfit.predict(model, sys.argv[1], events_out=model + ".csv")
print(sorted(m for m in ("tensorflow", "keras", "jax") if m in sys.modules))
"""


def test_litert_and_onnx_score_without_importing_tensorflow(exports: Exports) -> None:
    models = [str(exports.files[k]) for k in ("litert", "int8", "onnx")]
    result = subprocess.run(
        [sys.executable, "-c", SCORE_WITHOUT_TENSORFLOW, str(exports.scored), *models],
        env=cli_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_export_without_its_sidecar_is_refused_in_one_line(
    exports: Exports, tmp_path: Path
) -> None:
    bare = tmp_path / "model.tflite"
    shutil.copy(exports.files["litert"], bare)
    result = run_cli("predict", bare, exports.scored, "--events-out", tmp_path / "ev.csv")
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: {bare}: the exported model's metadata model.tflite.json is missing "
        "beside it (window, channels, threshold and the run it came from); export the run again "
        f"with chunkfit export RUN --format litert --out {bare}, which writes it"
    )
    assert not (tmp_path / "ev.csv").exists()


def test_saved_model_without_its_sidecar_is_refused_in_one_line(
    exports: Exports, tmp_path: Path
) -> None:
    bare = tmp_path / "saved_model"
    shutil.copytree(exports.files["saved_model"], bare)
    (bare / "chunkfit.json").unlink()
    result = run_cli("evaluate", bare, exports.store, "--plot", tmp_path / "eval.png")
    assert result.returncode == 2
    assert "the exported model's metadata chunkfit.json is missing" in error_line(result)


def test_sidecar_that_is_not_chunkfits_is_refused_in_one_line(
    exports: Exports, tmp_path: Path
) -> None:
    model = tmp_path / "model.onnx"
    shutil.copy(exports.files["onnx"], model)
    (tmp_path / "model.onnx.json").write_text(json.dumps({"producer": "someone else"}))
    result = run_cli("predict", model, exports.scored, "--events-out", tmp_path / "ev.csv")
    assert result.returncode == 2
    assert error_line(result).startswith(
        f"chunkfit: error: {model}.json: not a chunkfit export's metadata (no chunkfit_export)"
    )


def test_file_that_is_no_model_is_refused_in_one_line(exports: Exports, tmp_path: Path) -> None:
    model = tmp_path / "model.tflite"
    model.write_bytes(b"not a flatbuffer")
    shutil.copy(f"{exports.files['litert']}.json", f"{model}.json")
    result = run_cli("predict", model, exports.scored, "--events-out", tmp_path / "ev.csv")
    assert result.returncode == 1
    assert error_line(result).startswith(f"chunkfit: error: {model}: LiteRT cannot read it")


BLOCKED = """
import sys
sys.modules["onnxruntime"] = None  # as if the export extra were not installed
from chunkfit.cli import main
main(sys.argv[1:])
"""


def test_onnx_without_the_export_extra_names_it(exports: Exports, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED, "predict", str(exports.files["onnx"]),
         str(exports.scored), "--events-out", str(tmp_path / "ev.csv")],
        env=cli_env(), capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: {exports.files['onnx']}: scoring an ONNX model needs ONNX Runtime "
        "(onnxruntime); install it with pip install 'chunkfit[export]'"
    )
