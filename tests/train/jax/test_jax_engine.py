"""The JAX engine (``KERAS_BACKEND=jax`` or ``chunkfit --backend jax``).

The training guarantees marked ``backends`` (each window once per epoch, epoch logs equal to one
``model.fit``, callbacks across blocks, bit-identical resume, class weights, normalisation) run on
both backends as parameters of the suite (tests/backendparams.py); the tests here marked
``jax_only`` run on JAX alone, and the CLI tests run real subprocesses on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from support import run_cli

import chunkfit
from chunkfit.synth import SynthSpec, balanced_anomalies, synth

pytestmark = pytest.mark.slow

WINDOW = 16


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stores") / "s.zarr"
    synth(path, SynthSpec(samples=4_000, anomalies=balanced_anomalies(4_000, WINDOW), seed=1))
    return path


@pytest.mark.jax_only
def test_the_jax_engine_trains_and_records_itself_in_run_json(store: Path, tmp_path: Path) -> None:
    notes: list[tuple[str | None, str | None]] = []
    chunkfit.fit(
        "baseline-cnn",
        store,
        window=WINDOW,
        chunk=512,
        batch_size=64,
        epochs=1,
        validation=0.2,
        out=tmp_path / "run",
        progress=lambda p: notes.append((p.message, p.detail)) if p.phase == "notice" else None,
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["engine"] == "jax"
    # 50 batches of 64 in one call: too short a run to try both loops, and JAX computes on the CPU
    # here
    assert run["compile"] == {
        "jit": True,
        "loop": "dispatch",
        "by": "autotune: a run of 1 training calls of up to "
        "256 batches is too short to try both loops; the default on a CPU",
    }
    # the engine's line in a few words; its detail (--verbose) says why
    said = [(m, d) for m, d in notes if d is not None and d.startswith("JAX engine: ")]
    assert [m for m, _ in said] == [
        "JAX, train step under XLA, --jax-loop dispatch; --verbose says why"
    ]
    assert "--jax-loop dispatch" in said[0][1], said


@pytest.mark.jax_only
def test_a_long_enough_run_times_both_loops_records_them_and_trains_every_window_once(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One batch per call: 50 calls per epoch, enough calls for the trial (6 calls, both loops,
    timed), once the trial's cost bound allows it in a run of a second."""
    from chunkfit.train.jax import loopchoice

    monkeypatch.setattr(loopchoice, "TRIAL_SECONDS", 0.0)
    chunkfit.fit(
        "baseline-cnn",
        store,
        window=WINDOW,
        chunk=512,
        batch_size=64,
        epochs=2,
        validation=0.2,
        steps_per_execution=1,
        out=tmp_path / "run",
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    compiled = run["compile"]
    assert compiled["by"] == "autotune" and compiled["loop"] in ("dispatch", "scan"), compiled
    assert (
        set(compiled["windows_per_s"]) == {"dispatch", "scan"}
        and min(compiled["windows_per_s"].values()) > 0
    )
    train = run["split"]["train_ranges"]
    windows = sum(b - a - WINDOW + 1 for a, b in train)
    assert [e["train_windows"] for e in run["epochs"]] == [windows, windows]
    assert all(np.isfinite(e["loss"]) for e in run["epochs"])


def test_the_cli_trains_on_jax_and_both_backends_score_the_saved_model_alike(
    store: Path, tmp_path: Path
) -> None:
    """``--backend jax`` trains on the JAX engine; the model.keras it saves scores the same on
    TensorFlow."""
    run = tmp_path / "run"
    trained = run_cli(
        "--backend",
        "jax",
        "train",
        store,
        "--window",
        str(WINDOW),
        "--chunk",
        "512",
        "--batch-size",
        "64",
        "--epochs",
        "1",
        "--validation",
        "0.2",
        "--jax-loop",
        "scan",
        "--out",
        run,
        "--verbose",
    )
    assert trained.returncode == 0, trained.stderr
    assert (
        "JAX engine: " in trained.stdout
        and "looped inside one compiled call (--jax-loop scan)" in trained.stdout
    )
    recorded = json.loads((run / "run.json").read_text())
    assert recorded["engine"] == "jax" and recorded["compile"]["loop"] == "scan"
    scores = {}
    for backend in ("jax", "tensorflow"):
        out = tmp_path / f"{backend}.zarr"
        scored = run_cli("--backend", backend, "predict", run, store, "--out", out)
        assert scored.returncode == 0, scored.stderr
        scores[backend] = np.asarray(zarr.open_group(str(out), mode="r")["scores"][:])
    assert scores["jax"].shape == scores["tensorflow"].shape and scores["jax"].size > 1000
    np.testing.assert_allclose(scores["jax"], scores["tensorflow"], atol=1e-5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--jit", "off"), "--jit off: the JAX engine compiles every step with XLA"),
        (("--compute-threads", "2"), "--compute-threads is for the TensorFlow engine"),
        (
            ("--devices", "cpu:2"),
            "--devices cpu:2: several devices or workers train on the TensorFlow engine",
        ),
        (
            ("--jax-loop", "scan", "--deterministic"),
            "--jax-loop scan cannot be combined with --deterministic",
        ),
        (
            ("--jax-loop", "sideways"),
            "--jax-loop must be auto, dispatch or scan (received 'sideways')",
        ),
    ],
)
def test_what_the_jax_engine_cannot_do_is_refused_in_one_line_and_writes_nothing(
    store: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    proc = run_cli(
        "--backend",
        "jax",
        "train",
        store,
        "--window",
        str(WINDOW),
        "--out",
        tmp_path / "run",
        *args,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"chunkfit: error: {message}"), proc.stderr
    assert not (tmp_path / "run").exists()


def test_an_unknown_backend_is_refused_in_one_line(store: Path) -> None:
    proc = run_cli("--backend", "torch", "train", store)
    assert proc.returncode != 0
    assert (
        proc.stderr.strip()
        == "chunkfit: error: --backend must be tensorflow or jax (received 'torch')"
    )
