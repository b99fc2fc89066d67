"""Each built-in model trains on both engines, and evaluate and predict run on it; the dense picker
finds the markers of an easy store."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from support import make_store, run_cli

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


PICK_WINDOW = 64


@pytest.fixture(scope="module")
def bumps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """An easy store for a picker: 40 bumps of height 2 (a Hann window of 10 samples) in noise of
    0.2, each marked at its first sample."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 0.2, 6_000)
    markers = np.sort(rng.choice(np.arange(50, 5_950), 40, replace=False))
    for m in markers:
        x[m : m + 10] += 2 * np.hanning(10)
    path = tmp_path_factory.mktemp("stores") / "bumps.zarr"
    make_store(path, x[:, None].astype(np.float32), events=markers.tolist())
    return path, markers


@pytest.fixture(scope="module")
def picker_run(bumps: tuple[Path, np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "picker"
    result = run_cli(
        "train", bumps[0], "--model", "picker", "--window", PICK_WINDOW, "--stride", 8,
        "--epochs", 2, "--batch-size", 32, "--validation", 0.3, "--deterministic",
        "--backend", keras_backend(), "--out", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.backends
def test_picker_run_chooses_its_threshold_on_the_event_f1_of_its_picks(picker_run: Path) -> None:
    run = json.loads((picker_run / "run.json").read_text())
    assert (run["model"], run["engine"], run["config"]["pick_width"], len(run["epochs"])) == (
        "picker",
        keras_backend(),
        None,
        2,
    )
    assert run["threshold"]["rule"] == "event-f1" and run["threshold"]["pick_width"] == 21


@pytest.mark.backends
def test_picker_finds_the_markers_of_an_easy_store(
    picker_run: Path, bumps: tuple[Path, np.ndarray]
) -> None:
    result = run_cli("evaluate", picker_run, bumps[0], "--split", "all", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["picker"], report["markers"]) == (True, 40)
    assert report["recall"] >= 0.75 and report["precision"] >= 0.9


@pytest.mark.backends
def test_picker_predicts_one_detection_per_pick_at_its_sample(
    picker_run: Path, bumps: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    result = run_cli(
        "predict", picker_run, bumps[0], "--out", tmp_path / "s.zarr", "--events-out",
        tmp_path / "d.csv",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    with (tmp_path / "d.csv").open(newline="") as f:
        table = list(csv.DictReader(f))
    start, end, picks = (
        np.array([int(r[k]) for r in table], dtype=np.int64)
        for k in ("start_sample", "end_sample", "peak_sample")
    )
    peak_score = np.array([float(r["peak_score"]) for r in table])
    assert (end - start == 1).all() and (start == picks).all()
    near = np.abs(picks[:, None] - bumps[1][None, :]).min(axis=1)
    assert len(picks) >= 30 and (near <= 21).mean() >= 0.9
    scores = np.asarray(zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["scores"][:])
    assert np.nanmax(scores[picks]) <= 1.0 and (scores[picks] >= peak_score - 1e-6).all()
