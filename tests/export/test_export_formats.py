"""Float exports of a built-in model and of a ``module:function`` model, each run in its own
runtime with no chunkfit (LiteRT's interpreter, ONNX Runtime, TensorFlow for the SavedModel): the
same scores as Keras's ``model.predict`` on the same windows, and the metadata read back."""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from export_support import (
    FACTORY,
    export,
    keras_scores,
    on_device,
    sidecar_of,
    tiny_store,
    train,
)
from support import tree

from chunkfit.errors import DiskFullError
from chunkfit.export import SIDECAR_KEYS, export_run, write

FLOAT_FORMATS = {"litert": "model.tflite", "onnx": "model.onnx", "saved_model": "saved_model"}
MODELS = ("baseline-cnn", "export_formats_factory:build")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both runs, each exported in every float format and litert float16, run on the device side,
    and scored by Keras.

    The built-in's ONNX export goes through the CLI; the others call the library in this process
    (each CLI call would import TensorFlow again).
    """
    folder = tmp_path_factory.mktemp("export-formats")
    (folder / "export_formats_factory.py").write_text(FACTORY)
    store = tiny_store(folder)
    with ThreadPoolExecutor(2) as pool:
        trained = pool.map(
            lambda m: train(folder, store, m.replace(":", "-"), "--model", m), MODELS
        )
        runs = dict(zip(MODELS, trained, strict=True))
    line = export(runs["baseline-cnn"], "--format", "onnx")
    assert line.returncode == 0, line.stderr
    with contextlib.chdir(folder):  # where train found the module:function model's module
        for model, fmt in itertools.product(MODELS, FLOAT_FORMATS):
            if (model, fmt) != ("baseline-cnn", "onnx"):
                export_run(runs[model], fmt)
        export_run(runs["baseline-cnn"], "litert", quantize="float16")
    artifacts = {m: {f: runs[m] / name for f, name in FLOAT_FORMATS.items()} for m in MODELS}
    float16 = runs["baseline-cnn"] / "model-float16.tflite"
    everything = [a for per in artifacts.values() for a in per.values()] + [float16]
    return {
        "runs": runs,
        "artifacts": artifacts,
        "float16": float16,
        "device": on_device(store, [(a, sidecar_of(a)) for a in everything]),
        "line": line.stdout,
        "keras": {m: keras_scores(runs[m], store) for m in MODELS},
    }


@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
@pytest.mark.parametrize("model", MODELS)
def test_float_export_scores_equal_keras_in_its_own_runtime(
    exported: dict[str, Any], model: str, fmt: str
) -> None:
    scores = np.asarray(exported["device"][str(exported["artifacts"][model][fmt])]["scores"])
    assert scores.shape == exported["keras"][model].shape
    assert np.abs(scores - exported["keras"][model]).max() <= 1e-5


def test_float16_litert_scores_stay_close_to_keras(exported: dict[str, Any]) -> None:
    scores = np.asarray(exported["device"][str(exported["float16"])]["scores"])
    assert np.abs(scores - exported["keras"]["baseline-cnn"]).max() <= 1e-2


@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
def test_the_sidecar_reads_back_the_run(exported: dict[str, Any], fmt: str) -> None:
    run = exported["runs"]["baseline-cnn"]
    artifact = exported["artifacts"]["baseline-cnn"][fmt]
    meta = json.loads(sidecar_of(artifact).read_text())
    run_json = json.loads((run / "run.json").read_text())
    assert tuple(meta) == SIDECAR_KEYS
    assert meta["run"] == run_json
    assert {k: meta[k] for k in ("format", "file", "quantize", "model", "converted_on")} == {
        "format": fmt,
        "file": artifact.name,
        "quantize": None,
        "model": "baseline-cnn",
        "converted_on": "tensorflow",
    }
    assert (meta["window"], meta["stride"], meta["label"]) == (
        run_json["config"]["windows"]["window"],
        run_json["config"]["windows"]["stride"],
        run_json["config"]["windows"]["label"],
    )
    assert (meta["channels"], meta["n_channels"], meta["rate"]) == (["x"], 1, 1.0)
    assert (meta["classes"], meta["positive"]) == (run_json["classes"], 1)
    assert meta["threshold"] == run_json["threshold"]["value"]
    assert (meta["output_kind"], meta["normalization"]) == ("window", "inside")
    assert meta["trained_on"] == run_json["engine"]


@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
def test_the_input_is_one_window_of_raw_float32_signal(exported: dict[str, Any], fmt: str) -> None:
    meta = json.loads(sidecar_of(exported["artifacts"]["baseline-cnn"][fmt]).read_text())
    assert {k: meta["input"][k] for k in ("shape", "dtype", "scale", "zero_point")} == {
        "shape": [None, 16, 1],
        "dtype": "float32",
        "scale": None,
        "zero_point": None,
    }
    assert meta["output"]["shape"] == [None, 2]


def test_the_output_line_names_the_file_and_the_engines(exported: dict[str, Any]) -> None:
    run = exported["runs"]["baseline-cnn"]
    assert exported["line"].splitlines() == [
        "exported baseline-cnn (trained on tensorflow; converted on tensorflow) as onnx: "
        f"{run}/model.onnx ({(run / 'model.onnx').stat().st_size:,} bytes)",
        f"metadata {run}/model.onnx.json",
    ]


def test_an_existing_export_is_refused_without_overwrite_and_kept(
    exported: dict[str, Any],
) -> None:
    run = exported["runs"]["baseline-cnn"]
    before = (run / "model.onnx").read_bytes()
    result = export(run, "--format", "onnx")
    assert (result.returncode, result.stderr.strip()) == (
        1,
        f"chunkfit: error: {run}/model.onnx: already exists; pass --overwrite to replace it",
    )
    assert (run / "model.onnx").read_bytes() == before


def test_overwrite_replaces_a_saved_model_folder_whole(
    exported: dict[str, Any], tmp_path: Path
) -> None:
    run = exported["runs"]["baseline-cnn"]
    out = tmp_path / "sm"
    out.mkdir()
    (out / "chunkfit.json").write_text("{}")  # an earlier export's: --overwrite may replace it
    (out / "stale.txt").write_text("old")
    export_run(run, "saved_model", out=out, overwrite=True)
    assert not (out / "stale.txt").exists()
    assert json.loads((out / "chunkfit.json").read_text())["file"] == "sm"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sm"]


def test_a_full_disk_while_writing_the_sidecar_leaves_nothing(
    exported: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path, data: dict[str, Any]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(write, "write_sidecar", full)
    out = tmp_path / "d.tflite"
    with pytest.raises(DiskFullError) as caught:
        export_run(exported["runs"]["baseline-cnn"], "litert", out=out)
    assert str(caught.value) == (
        f"{out}: disk full (No space left on device); nothing was written; free some space and "
        "export again"
    )
    assert tree(tmp_path) == {}
