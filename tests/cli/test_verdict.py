"""The end-of-training verdict and ``--fail-under`` on a run built to fail, through the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import error_line, make_store, run_cli

pytestmark = pytest.mark.slow

RATE = 100.0
N = 4000


@pytest.fixture(scope="module")
def noise_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pure noise with markers at random: nothing to learn; two markers in the validation tenth."""
    rng = np.random.default_rng(7)
    signal = rng.normal(size=(N, 1)).astype(np.float32)
    events = sorted([*rng.choice(np.arange(100, 3500), 20, replace=False).tolist(), 3700, 3850])
    return make_store(tmp_path_factory.mktemp("noise") / "noise.zarr", signal, events=events)


@pytest.fixture(scope="module")
def failed(
    noise_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("failed") / "run"
    result = run_cli(
        "train",
        noise_store,
        "--window",
        "32",
        "--epochs",
        "1",
        "--batch-size",
        "64",
        "--chunk",
        "1024",
        "--fail-under",
        "event_f1=0.99",
        "--out",
        out,
    )
    return result, out


@pytest.mark.backends
def test_a_run_under_its_target_exits_3_after_writing_the_run(
    failed: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = failed
    assert result.returncode == 3, result.stderr
    assert json.loads((out / "run.json").read_text())["finished"] is True
    assert (out / "model.keras").is_file()


@pytest.mark.backends
def test_a_run_under_its_target_says_which_figure_in_one_error_line(
    failed: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = failed
    errors = [line for line in result.stderr.splitlines() if line.startswith("chunkfit: error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert errors[0].startswith(f"chunkfit: error: {out}: written, but event_f1 0.")
    assert errors[0].endswith(" is under --fail-under event_f1=0.99")


@pytest.mark.backends
def test_a_validation_split_of_two_events_gets_a_warning_line(
    failed: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = failed
    assert (
        "warning: the validation split holds 2 event(s), fewer than 3: its threshold and figures "
        "rest on too few to trust; hold out more (--validation 0.3, or --validation-segments) or "
        "mark more events"
    ) in result.stderr.splitlines()


@pytest.mark.backends
def test_the_warnings_printed_are_those_kept_in_run_json(
    failed: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = failed
    printed = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert json.loads((out / "run.json").read_text())["warnings"] == printed


def test_a_figure_fail_under_cannot_name_is_refused_before_training(
    noise_store: Path, tmp_path: Path
) -> None:
    result = run_cli(
        "train", noise_store, "--fail-under", "accuracy=0.9", "--out", tmp_path / "run"
    )
    assert result.returncode == 2
    assert error_line(result) == (
        "chunkfit: error: --fail-under must be FIGURE=VALUE with FIGURE one of event_f1, "
        "event_recall, event_precision, pr_auc, f1, precision, recall, e.g. --fail-under "
        "event_f1=0.8 (received 'accuracy=0.9')"
    )
    assert not (tmp_path / "run").exists()


def test_zero_epochs_are_refused_in_one_line(noise_store: Path, tmp_path: Path) -> None:
    result = run_cli("train", noise_store, "--epochs", "0", "--out", tmp_path / "run")
    assert result.returncode == 2
    assert error_line(result) == (
        "chunkfit: error: --epochs must be a whole number of at least 1: a run of 0 epochs would "
        "write an untrained model and threshold (received 0)"
    )
    assert not (tmp_path / "run").exists()
