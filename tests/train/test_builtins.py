"""Each built-in model trains one tiny epoch on both engines, and evaluate and predict run on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from support import run_cli

from chunkfit.synth import SynthSpec, synth
from chunkfit.train.backend import keras_backend
from chunkfit.train.inception import inception_kernels

pytestmark = pytest.mark.slow

WINDOW = 32
STRIDE = 4


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stores") / "s.zarr"
    synth(path, SynthSpec(samples=3_000, anomalies=30, seed=3, bump=2.0))
    return path


@pytest.fixture(scope="module")
def inception_run(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "run"
    result = run_cli(
        "train", store, "--model", "inception-time", "--window", WINDOW, "--stride", STRIDE,
        "--epochs", 1, "--batch-size", 64, "--backend", keras_backend(), "--out", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def test_inception_kernels_scale_with_the_window() -> None:
    assert [inception_kernels(w) for w in (200, 104, 20, 500)] == [
        (40, 20, 10),
        (26, 13, 6),
        (5, 2, 1),
        (40, 20, 10),
    ]


@pytest.mark.backends
def test_inception_time_trains_one_epoch_into_a_run(inception_run: Path) -> None:
    run = json.loads((inception_run / "run.json").read_text())
    assert (run["model"], run["engine"], len(run["epochs"])) == (
        "inception-time",
        keras_backend(),
        1,
    )


@pytest.mark.backends
def test_inception_time_run_evaluates(inception_run: Path, store: Path) -> None:
    result = run_cli("evaluate", inception_run, store, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["windows"] > 0 and 0.0 <= report["pr_auc"] <= 1.0


@pytest.mark.backends
def test_inception_time_run_predicts(inception_run: Path, store: Path, tmp_path: Path) -> None:
    result = run_cli("predict", inception_run, store, "--out", tmp_path / "scores.zarr")
    assert result.returncode == 0, result.stderr
    scores = np.asarray(zarr.open_group(str(tmp_path / "scores.zarr"), mode="r")["scores"][:])
    assert np.isfinite(scores[: scores.size - WINDOW + 1 : STRIDE]).all()
