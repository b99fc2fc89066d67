"""One process owns a run folder, and one process writes a predict output: real subprocesses, real
locks.

The first trainer is held inside its first checkpoint write by the
``CHUNKFIT_TEST_CHECKPOINT_PAUSE`` hook (chunkfit/train/checkpoint.py), so the second one meets it
alive at a known moment, whatever the machine's load; no assertion is about time.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from support import cli_command, cli_env, error_line, run_cli, tree

from chunkfit._fs import FileLock, Locked
from chunkfit.synth import SynthSpec, balanced_anomalies, synth
from chunkfit.train import checkpoint
from chunkfit.train.runfolder import LOCK_FILE

pytestmark = pytest.mark.slow

WINDOW = 16
TRAIN = [
    "--window",
    str(WINDOW),
    "--chunk",
    "64",
    "--batch-size",
    "32",
    "--mix",
    "1",
    "--epochs",
    "1",
    "--checkpoint-every",
    "1",
]
STALE_PIDS = [
    "999999999",
    str(os.getpid()),
    "",
    "not a pid",
]  # what a lock file nobody holds may say


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lock") / "s.zarr"
    synth(path, SynthSpec(samples=1_000, anomalies=balanced_anomalies(1_000, WINDOW), seed=3))
    return path


def train_over_a_stale_lock_file(
    store: Path, pid: str, base: Path
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A trainer on a folder holding a lock file that says ``pid`` and that no process holds."""
    run = base / "run"
    run.mkdir()
    (run / LOCK_FILE).write_text(pid)
    return run_cli("train", store, *TRAIN, "--out", run, timeout=300), run


@pytest.fixture(scope="module", autouse=True)
def launched(
    store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Any]]]:
    """The module's trainers that need no other process beside them, started with the module one
    after another in a thread: they train on one core while the tests below hold, kill and restart
    their own trainers on the other (as many of those processes as of these). The first one's
    finished run is also what the predict tests at the end of the module score."""
    jobs: dict[str, Callable[[Path], Any]] = {
        f"stale-{pid}": partial(train_over_a_stale_lock_file, store, pid) for pid in STALE_PIDS
    }
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield {
            name: pool.submit(job, tmp_path_factory.mktemp("launched"))
            for name, job in jobs.items()
        }


def start_held(store: Path, run: Path) -> subprocess.Popen[bytes]:
    """A trainer on ``run`` that waits inside its first checkpoint write until PAUSED is deleted."""
    proc = subprocess.Popen(
        cli_command("train", str(store), *TRAIN, "--out", str(run)),
        env={**cli_env(), checkpoint.PAUSE_HOOK: "1:600"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    paused = run / "checkpoint.tmp" / checkpoint.PAUSED
    deadline = time.monotonic() + 240
    while not paused.is_file():
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, "the first trainer made no checkpoint for 4 minutes"
        time.sleep(0.01)
    return proc


def test_a_second_trainer_on_a_folder_in_use_is_refused_naming_the_process(
    store: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    first = start_held(store, run)
    try:
        before = tree(run)
        second = run_cli("train", store, *TRAIN, "--out", run)
        assert (
            error_line(second)
            == f"chunkfit: error: {run}: run in use by process {first.pid}; wait for it or stop it"
        )
        assert second.returncode == 1
        assert tree(run) == before
    finally:
        (run / "checkpoint.tmp" / checkpoint.PAUSED).unlink(missing_ok=True)
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()
    assert (run / "model.keras").is_file()
    assert not (run / LOCK_FILE).exists()


def test_a_trainer_killed_before_its_first_checkpoint_leaves_a_lock_file_that_stops_nobody(
    store: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    first = start_held(store, run)
    first.kill()
    first.communicate()
    assert (run / LOCK_FILE).is_file()  # left behind by the killed process
    again = run_cli("train", store, *TRAIN, "--out", run, timeout=300)
    assert again.returncode == 0, again.stderr
    assert (
        "resuming the run" not in again.stdout
    )  # the kill came before the first checkpoint was complete
    assert (run / "model.keras").is_file()
    assert not (run / LOCK_FILE).exists()


def test_the_same_command_resumes_at_once_after_kill_9(store: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = start_held(store, run)
    (run / "checkpoint.tmp" / checkpoint.PAUSED).unlink()
    deadline = time.monotonic() + 240
    while checkpoint.latest(run) is None:
        assert first.poll() is None, first.communicate()[1].decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    first.kill()
    first.communicate()
    again = run_cli("train", store, *TRAIN, "--out", run, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "resuming the run" in again.stdout


@pytest.mark.parametrize(
    "pid", STALE_PIDS, ids=["no-such-pid", "a-live-process", "empty", "not-a-pid"]
)
def test_a_lock_file_nobody_holds_is_no_obstacle(
    launched: dict[str, Future[Any]], pid: str
) -> None:
    result, run = launched[f"stale-{pid}"].result()
    assert result.returncode == 0, result.stderr
    assert (run / "model.keras").is_file()


def test_a_folder_locked_by_another_process_is_refused_before_anything_is_read(
    store: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lock = FileLock(run / LOCK_FILE)
    lock.acquire()
    lock.claim()
    try:
        before = tree(run)
        result = run_cli("train", store, *TRAIN, "--out", run, "--restart")
        assert error_line(result) == (
            f"chunkfit: error: {run}: run in use by process {os.getpid()}; wait for it or stop it"
        )
        assert tree(run) == before
    finally:
        lock.release()
    assert not (run / LOCK_FILE).exists()


def test_a_lock_is_refused_to_a_second_holder_and_free_after_release(tmp_path: Path) -> None:
    first, second = FileLock(tmp_path / "x.lock"), FileLock(tmp_path / "x.lock")
    first.acquire()
    with pytest.raises(Locked) as unclaimed:
        second.acquire()
    assert unclaimed.value.pid == 0  # holder not named until it claims the lock
    first.claim()
    with pytest.raises(Locked) as held:
        second.acquire()
    assert held.value.pid == os.getpid()
    first.release()
    second.acquire()
    assert second.held
    second.release()
    assert not (tmp_path / "x.lock").exists()


def test_taking_and_releasing_a_lock_file_made_by_someone_else_leaves_it_as_it_was(
    tmp_path: Path,
) -> None:
    (tmp_path / "x.lock").write_text("12345\n")
    lock = FileLock(tmp_path / "x.lock")
    lock.acquire()
    lock.release()
    assert (tmp_path / "x.lock").read_text() == "12345\n"


# -- predict -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(launched: dict[str, Future[Any]]) -> Path:
    """A run trained to its end: the first one over a stale lock file."""
    result, run = launched[f"stale-{STALE_PIDS[0]}"].result()
    assert result.returncode == 0, result.stderr
    return run  # type: ignore[no-any-return]


@pytest.mark.parametrize("flag", ["--out", "--events-out"])
def test_predict_refuses_an_output_another_process_is_writing(
    finished_run: Path, store: Path, tmp_path: Path, flag: str
) -> None:
    held = tmp_path / ("scores.zarr" if flag == "--out" else "events.csv")
    lock = FileLock(tmp_path / f".{held.name}.chunkfit.lock")
    lock.acquire()
    lock.claim()
    try:
        before = tree(tmp_path)
        result = run_cli(
            "predict",
            finished_run,
            store,
            "--out",
            tmp_path / "scores.zarr",
            "--events-out",
            tmp_path / "events.csv",
        )
        assert error_line(result) == (
            f"chunkfit: error: {held}: output in use by process {os.getpid()}; "
            "wait for it or stop it"
        )
        assert tree(tmp_path) == before
    finally:
        lock.release()


def test_predict_leaves_no_lock_file_behind(
    finished_run: Path, store: Path, tmp_path: Path
) -> None:
    result = run_cli(
        "predict",
        finished_run,
        store,
        "--out",
        tmp_path / "scores.zarr",
        "--events-out",
        tmp_path / "events.csv",
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.csv", "scores.zarr"]
