"""Full-integer exports (LiteRT int8 and the C array of it), calibrated on the run's training
split; and a run trained on JAX, converted on TensorFlow."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from export_support import export, keras_scores, on_device, sidecar_of, tiny_store, train
from support import error_line, make_store

from chunkfit.export import export_run

INT8_TOLERANCE = 0.05  # scores in [0, 1] quantised in steps of 1/256, through every layer


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("export-int8")
    store = tiny_store(folder)
    with ThreadPoolExecutor(2) as pool:
        run, jax_run = pool.map(
            lambda args: train(folder, store, *args), [("run",), ("jax-run", "--backend", "jax")]
        )
    int8 = export(run, "--quantize", "int8")
    assert int8.returncode == 0, int8.stderr
    on_jax = export(jax_run, "--format", "litert")
    assert on_jax.returncode == 0, on_jax.stderr
    export_run(run, "c-array")
    artifacts = [run / "model-int8.tflite", run / "model-int8.c", jax_run / "model.tflite"]
    return {
        "store": store,
        "run": run,
        "jax_run": jax_run,
        "lines": {"int8": int8.stdout, "jax": on_jax.stdout},
        "device": on_device(store, [(a, sidecar_of(a)) for a in artifacts]),
        "keras": {"run": keras_scores(run, store), "jax_run": keras_scores(jax_run, store)},
    }


def test_int8_litert_takes_and_gives_int8_with_their_scales(exported: dict[str, Any]) -> None:
    path = exported["run"] / "model-int8.tflite"
    meta = json.loads(sidecar_of(path).read_text())
    seen = exported["device"][str(path)]
    assert (meta["quantize"], meta["input"]["dtype"], meta["output"]["dtype"]) == (
        "int8",
        "int8",
        "int8",
    )
    assert (seen["input"], seen["output"]) == ("int8", "int8")
    assert [meta["input"]["scale"], meta["input"]["zero_point"]] == pytest.approx(seen["input_q"])
    assert [meta["output"]["scale"], meta["output"]["zero_point"]] == pytest.approx(
        seen["output_q"]
    )
    assert meta["input"]["scale"] > 0


def test_int8_litert_scores_stay_close_to_keras(exported: dict[str, Any]) -> None:
    scores = np.asarray(exported["device"][str(exported["run"] / "model-int8.tflite")]["scores"])
    assert np.abs(scores - exported["keras"]["run"]).max() <= INT8_TOLERANCE


def test_int8_is_calibrated_on_training_windows_with_events(exported: dict[str, Any]) -> None:
    line = exported["lines"]["int8"].splitlines()[-1]
    found = re.fullmatch(
        r"int8     calibrated on 300 windows of the run's training split \((\d+) with an event\)",
        line,
    )
    assert found is not None, line
    assert int(found.group(1)) > 0


def test_the_c_array_is_the_int8_model_as_xxd_writes_it(exported: dict[str, Any]) -> None:
    text = (exported["run"] / "model-int8.c").read_text()
    lines = text.splitlines()
    start = lines.index("const unsigned char model_int8_tflite[] = {")
    end = lines.index("};")
    rows = [re.findall(r"0x[0-9a-f]{2}", row) for row in lines[start + 1 : end]]
    assert all(len(r) == 12 for r in rows[:-1]) and 1 <= len(rows[-1]) <= 12
    assert lines[end + 1] == f"const unsigned int model_int8_tflite_len = {sum(map(len, rows))};"
    assert lines[0].startswith("/* chunkfit export") and '"window": 16,' in text


def test_the_c_array_runs_and_scores_close_to_keras(exported: dict[str, Any]) -> None:
    path = exported["run"] / "model-int8.c"
    meta = json.loads(sidecar_of(path).read_text())
    scores = np.asarray(exported["device"][str(path)]["scores"])
    assert (meta["format"], meta["quantize"], meta["input"]["shape"]) == (
        "c-array",
        "int8",
        [1, 16, 1],
    )
    assert np.abs(scores - exported["keras"]["run"]).max() <= INT8_TOLERANCE


def test_a_run_trained_on_jax_exports_on_tensorflow_and_says_so(
    exported: dict[str, Any],
) -> None:
    path = exported["jax_run"] / "model.tflite"
    meta = json.loads(sidecar_of(path).read_text())
    assert "(trained on jax; converted on tensorflow)" in exported["lines"]["jax"]
    assert (meta["trained_on"], meta["converted_on"]) == ("jax", "tensorflow")
    scores = np.asarray(exported["device"][str(path)]["scores"])
    assert np.abs(scores - exported["keras"]["jax_run"]).max() <= 1e-5


def test_int8_on_another_store_is_refused(exported: dict[str, Any], tmp_path: Path) -> None:
    other = make_store(tmp_path / "o.zarr", np.zeros((500, 1), np.float32), events=[50])
    result = export(
        exported["run"], "--quantize", "int8", "--store", other, "--out", tmp_path / "m.tflite"
    )
    assert (result.returncode, error_line(result)) == (
        1,
        f"chunkfit: error: {other}: not the store the run trained on (its samples, channels, "
        "rate or sources differ); pass --store with the training store",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.zarr"]
