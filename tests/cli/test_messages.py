"""Messages that point the right way: swapped arguments, where a rate came from, a global option
after the command, one rule for exit codes, and refusals that come before TensorFlow is imported.
"""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
from scoring_support import Trained
from support import cli_env, error_line, run_cli, snapshot, write_csv

# Runs the CLI with TensorFlow and JAX impossible to import: a command that still prints its one
# error line refused before it needed either.
NO_TENSORFLOW = (
    "import sys; sys.modules['tensorflow'] = None; sys.modules['jax'] = None; "
    "from chunkfit.cli import main; main()"
)


def run_without_tensorflow(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_TENSORFLOW, *map(str, args)],
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "gaps.csv", np.arange(20.0).reshape(10, 2), names=["a", "b"])


@pytest.fixture
def store(tmp_path: Path, recording: Path) -> Path:
    path = tmp_path / "ref.zarr"
    assert run_cli("ingest", path, recording).returncode == 0
    return path


def test_ingest_with_source_and_store_swapped_names_the_recording(
    recording: Path, store: Path
) -> None:
    before = snapshot(store), recording.read_bytes()
    result = run_cli("ingest", recording, store)
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: {recording} is a CSV file, not a store; the store comes first: "
        f"chunkfit ingest STORE.zarr {recording}"
    )
    assert (snapshot(store), recording.read_bytes()) == before


def test_ingest_append_with_source_and_store_swapped_names_the_recording(
    recording: Path, store: Path
) -> None:
    result = run_cli("ingest", recording, store, "--append")
    assert result.returncode == 2
    assert error_line(result).startswith(f"chunkfit: error: {recording} is a CSV file, not a store")


def test_ingest_of_a_wav_file_given_as_the_store_names_its_format(tmp_path: Path) -> None:
    audio = _wav(tmp_path / "tone.wav", rate=200)
    result = run_cli("ingest", audio)
    assert error_line(result) == (
        f"chunkfit: error: {audio} is a WAV/FLAC recording, not a store; the store comes first: "
        f"chunkfit ingest STORE.zarr {audio}"
    )


def test_train_on_a_recording_says_to_ingest_it_first(recording: Path) -> None:
    result = run_without_tensorflow("train", recording)
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: {recording} is a CSV file, not a store; ingest it into one first: "
        f"chunkfit ingest STORE.zarr {recording}"
    )


def test_evaluate_with_store_and_run_swapped_says_the_run_comes_first(
    runs: Trained,
) -> None:
    result = run_without_tensorflow("evaluate", runs.store, runs.run)
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: {runs.store} is a store and {runs.run} a run: the run comes first "
        f"(chunkfit evaluate {runs.run} {runs.store})"
    )


def test_predict_given_a_store_where_the_run_goes_says_the_run_comes_first(
    store: Path, tmp_path: Path
) -> None:
    scores = tmp_path / "scores.zarr"
    result = run_without_tensorflow("predict", store, tmp_path / "other.zarr", "--out", scores)
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: {store} is a store, not a run: give the run folder (or .keras file) "
        "first, then the store"
    )
    assert not scores.exists()


def test_evaluate_given_a_store_where_the_run_goes_says_so_whatever_follows(
    store: Path, tmp_path: Path
) -> None:
    result = run_without_tensorflow("evaluate", store, tmp_path / "missing")
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: {store} is a store, not a run: give the run folder (or .keras file) "
        "first, then the store"
    )


def _wav(path: Path, rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.arange(400) % 50 * 100).astype("<i2").tobytes())
    return path


def test_ingest_at_another_rate_than_the_rate_option_names_the_option(tmp_path: Path) -> None:
    audio = _wav(tmp_path / "fast.wav", rate=200)
    result = run_cli("ingest", tmp_path / "y.zarr", audio, "--rate", "100")
    assert result.returncode == 1
    assert error_line(result) == (
        f"chunkfit: error: {audio}: runs at 200 Hz, --rate at 100 Hz; drop --rate to take the "
        "file's own rate, or resample it"
    )
    assert not (tmp_path / "y.zarr").exists()


def test_backend_after_the_command_is_taken_as_the_global_option(store: Path) -> None:
    """``--backend`` is read after the command too: an unknown backend is refused as one, not as
    "No such option"."""
    result = run_without_tensorflow("info", store, "--backend", "nosuch")
    after = error_line(result)
    before = error_line(run_without_tensorflow("--backend", "nosuch", "info", store))
    assert after == before
    assert "No such option" not in after
    assert result.returncode == 2


def test_chunk_zero_exits_2_in_train(store: Path) -> None:
    result = run_without_tensorflow("train", store, "--chunk", "0")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --chunk must be a positive integer (received 0)",
    )


def test_chunk_zero_exits_2_in_evaluate(runs: Trained) -> None:
    result = run_without_tensorflow("evaluate", runs.run, runs.store, "--chunk", "0")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --chunk must be a positive integer (received 0)",
    )


def test_an_unknown_split_is_refused_before_tensorflow_is_imported(runs: Trained) -> None:
    result = run_without_tensorflow("evaluate", runs.run, runs.store, "--split", "valid")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --split must be one of validation, train, all (received 'valid')",
    )


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_store_of_other_channels_is_refused_before_tensorflow_is_imported(
    runs: Trained, recording: Path, tmp_path: Path, command: str
) -> None:
    store = tmp_path / "two.zarr"
    assert run_cli("ingest", store, recording).returncode == 0
    extra = ["--out", tmp_path / "scores.zarr"] if command == "predict" else []
    result = run_without_tensorflow(command, runs.run, store, *extra)
    assert (result.returncode, error_line(result)) == (
        1,
        f"chunkfit: error: {store}: channels ['a', 'b'] differ from the training store's ['x']; "
        "score a store ingested with the same channels (--columns), or map them with --channels "
        "RUN=STORE,...",
    )
    assert not (tmp_path / "scores.zarr").exists()
