"""Checkpoints and resuming ``chunkfit train`` after SIGKILL, with real subprocesses, real
TensorFlow and real kills at seeded random moments; and the faults a run meets while training.

Kill moments are anchored on progress, not on the clock: each attempt is killed a random
0-1 s (seeded) after it wrote its first checkpoint, so every attempt gets somewhere whatever the
machine's load, and the kill lands in a fit call, a block read, a checkpoint write or an epoch's
end. The ``CHUNKFIT_TEST_CHECKPOINT_PAUSE`` hook (chunkfit/train/checkpoint.py) holds one checkpoint
write open so that a kill lands inside a write on purpose, or the store is appended to while the run
waits. The long scenarios run two at a time in threads (``launched``); no assertion is about time.
"""

from __future__ import annotations

import io
import json
import random
import re
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from support import SUFFIX, cli_command, cli_env, error_line, run_cli, tree

import chunkfit
from chunkfit.config import SplitSpec, WindowSpec
from chunkfit.core.blocks import plan_blocks
from chunkfit.core.windows import plan_split
from chunkfit.synth import SynthSpec, balanced_anomalies, synth
from chunkfit.train import checkpoint

pytestmark = pytest.mark.slow

WINDOW = 16
SAMPLES = 2_000
CHUNK = 64
TRAIN = [
    "--window",
    str(WINDOW),
    "--chunk",
    str(CHUNK),
    "--batch-size",
    "32",
    "--mix",
    "1",
    "--epochs",
    "2",
    "--checkpoint-every",
    "1",
]
RANDOM_KILLS = 2
RUN_FILES = ["curves.png", "history.csv", "model.keras", "run.json"]


def make_store(path: Path, samples: int = SAMPLES) -> Path:
    synth(path, SynthSpec(samples=samples, anomalies=balanced_anomalies(samples, WINDOW), seed=1))
    return path


def train_blocks(store: Path) -> int:
    """Training blocks per epoch of TRAIN on ``store`` (one checkpoint after each, the last at the
    epoch's end)."""
    with chunkfit.open_store(store) as s:
        split = plan_split(s.segments, WindowSpec(WINDOW), SplitSpec())
    return len(plan_blocks(split.train, WINDOW, 1, CHUNK))


def start(
    store: Path, run: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cli_command("train", str(store), *TRAIN, *extra, "--out", str(run)),
        env={**cli_env(), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def sequence(run: Path) -> int:
    """Sequence number of the run's newest complete checkpoint (0: none yet)."""
    found = checkpoint.latest(run) if run.is_dir() else None
    return found.sequence if found is not None else 0


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[bytes]) -> bool:
    """Poll until ``condition()`` holds; False if ``proc`` ended first."""
    deadline = time.monotonic() + 240
    while not condition():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the run made no progress for 4 minutes"
        time.sleep(0.01)
    return True


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    _, err = proc.communicate()
    assert b"Traceback" not in err, err.decode()


def kill_at_random(
    store: Path, run: Path, rng: random.Random, *extra: str
) -> subprocess.CompletedProcess[str] | None:
    """Start the run and SIGKILL it a random moment after its first new checkpoint.

    Returns None once killed, or the run's output if it finished first.
    """
    before = sequence(run)
    proc = start(store, run, *extra)
    if wait_for(lambda: sequence(run) > before, proc):
        try:
            proc.wait(timeout=rng.uniform(0.0, 1.0))
        except subprocess.TimeoutExpired:
            kill(proc)
            return None
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


def killed_then_finished(
    store: Path, run: Path, rng: random.Random, times: int, *extra: str
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Kill the run at ``times`` random moments (fewer if it gets to its end first), then run it to
    the end.

    Returns the number of kills and the output of the run that finished.
    """
    for kills in range(times):
        finished = kill_at_random(store, run, rng, *extra)
        if finished is not None:
            return kills, finished
    return times, run_cli("train", store, *TRAIN, *extra, "--out", run, timeout=300)


def kill_inside_checkpoint(store: Path, run: Path, n: int, *extra: str) -> None:
    """Start the run and SIGKILL it while it writes its ``n``-th checkpoint (held open by the test
    hook)."""
    proc = start(store, run, *extra, env={checkpoint.PAUSE_HOOK: f"{n}:600"})
    assert wait_for(lambda: (run / "checkpoint.tmp" / checkpoint.PAUSED).is_file(), proc)
    kill(proc)


def weights(run: Path) -> dict[str, np.ndarray]:
    """Every array of model.keras's weights file (model and optimizer variables), by path."""
    with zipfile.ZipFile(run / "model.keras") as archive:
        data = archive.read("model.weights.h5")
    out: dict[str, np.ndarray] = {}
    with h5py.File(io.BytesIO(data), "r") as f:
        f.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


def history_epochs(run: Path) -> list[str]:
    return [line.split(",")[0] for line in (run / "history.csv").read_text().splitlines()[1:]]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("store") / "s.zarr")


def reference_run(store: Path, base: Path) -> Path:
    """The deterministic run, never interrupted."""
    run = base / "run"
    result = run_cli("train", store, *TRAIN, "--deterministic", "--out", run, timeout=300)
    assert result.returncode == 0, result.stderr
    return run


@pytest.fixture(scope="module")
def launched(
    store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Any]]]:
    """Every long scenario of the module, each a chain of subprocesses, two at a time in threads."""
    jobs: dict[str, Callable[[Path], Any]] = {
        "deterministic": partial(deterministic_run, store),
        "shuffled": partial(shuffled_run, store),
        "reference": partial(reference_run, store),
        "memory": memory_run,
        "grown-zarr": partial(grown_run, "zarr"),
        "grown-hdf5": partial(grown_run, "hdf5"),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(job, tmp_path_factory.mktemp(name)) for name, job in jobs.items()}


@pytest.fixture(scope="module")
def reference(launched: dict[str, Future[Any]]) -> Path:
    return launched["reference"].result()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def deterministic(launched: dict[str, Future[Any]]) -> Killed:
    return launched["deterministic"].result()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def paused(deterministic: Killed) -> Path:
    """A copy of the deterministic run as its first kill left it: two checkpoints written."""
    return deterministic.run.parent / "paused"


@pytest.fixture(scope="module")
def shuffled(launched: dict[str, Future[Any]]) -> Killed:
    return launched["shuffled"].result()  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=["zarr", "hdf5"])
def grown(
    request: pytest.FixtureRequest, launched: dict[str, Future[Any]]
) -> tuple[Any, Path, Path]:
    return launched[f"grown-{request.param}"].result()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def memory(launched: dict[str, Future[Any]]) -> dict[str, dict[int, int]]:
    return launched["memory"].result()  # type: ignore[no-any-return]


@dataclass
class Killed:
    """A run killed several times, then run to its end."""

    run: Path
    kills: int
    final: subprocess.CompletedProcess[str]
    checkpoint_before: dict[str, bytes | None]  # checkpoint/ just before the kill inside a write
    checkpoint_after: dict[str, bytes | None]  # and just after it
    rows_at_kill: list[str]  # history.csv's epochs when the first kill landed


def deterministic_run(store: Path, base: Path) -> Killed:
    """--deterministic: killed inside its third checkpoint write, then at two random moments."""
    run = base / "run"
    proc = start(store, run, "--deterministic", env={checkpoint.PAUSE_HOOK: "3:600"})
    assert wait_for(lambda: (run / "checkpoint.tmp" / checkpoint.PAUSED).is_file(), proc)
    before = tree(run / "checkpoint")
    kill(proc)
    after = tree(run / "checkpoint")
    shutil.copytree(run, base / "paused")  # an unfinished run, for the refusal tests
    kills, final = killed_then_finished(
        store, run, random.Random(5), RANDOM_KILLS, "--deterministic"
    )
    kills += 1
    return Killed(run, kills, final, before, after, [])


def shuffled_run(store: Path, base: Path) -> Killed:
    """Without --deterministic: killed inside the checkpoint at the end of epoch 1 (after its
    history row), then at a random moment, then finished with --resume."""
    run = base / "run"
    kill_inside_checkpoint(store, run, train_blocks(store))
    rows = history_epochs(run)
    kills, final = killed_then_finished(store, run, random.Random(7), 1, "--resume")
    kills += 1
    return Killed(run, kills, final, {}, {}, rows)


# -- kills -----------------------------------------------------------------------------------------


def test_kill_inside_a_checkpoint_write_leaves_the_previous_checkpoint_intact(
    deterministic: Killed,
) -> None:
    assert deterministic.checkpoint_after == deterministic.checkpoint_before
    assert json.loads(deterministic.checkpoint_after["state.json"] or b"")["sequence"] == 2


def test_deterministic_run_killed_three_times_ends_with_the_weights_of_an_uninterrupted_run(
    deterministic: Killed, reference: Path
) -> None:
    assert deterministic.final.returncode == 0, deterministic.final.stderr
    ours, theirs = weights(deterministic.run), weights(reference)
    assert sorted(ours) == sorted(theirs)
    assert all(np.array_equal(ours[k], theirs[k]) for k in theirs)


def test_deterministic_resumed_run_logs_the_same_history_as_an_uninterrupted_run(
    deterministic: Killed, reference: Path
) -> None:
    assert (deterministic.run / "history.csv").read_text() == (
        reference / "history.csv"
    ).read_text()


def test_every_kill_is_resumed_from_a_checkpoint(deterministic: Killed) -> None:
    resumes = json.loads((deterministic.run / "run.json").read_text())["resumes"]
    assert len(resumes) == deterministic.kills
    assert resumes[0] == {"seed": 0, "epoch": 0, "position": 2}


def test_rerun_of_a_killed_run_says_where_it_resumes(deterministic: Killed) -> None:
    first = deterministic.final.stdout.splitlines()[0]
    assert re.fullmatch(
        rf"resuming the run in {re.escape(str(deterministic.run))} from its checkpoint: \d of 2 "
        r"epoch\(s\)"
        r"( and \d+ of \d+ blocks of epoch \d)? done",
        first,
    ), first


def test_resumed_run_trains_every_block_exactly_once_per_epoch(
    shuffled: Killed, store: Path
) -> None:
    assert shuffled.final.returncode == 0, shuffled.final.stderr
    run = json.loads((shuffled.run / "run.json").read_text())
    n = train_blocks(store)
    assert [sorted(e["blocks"]) for e in run["epochs"]] == [list(range(n)), list(range(n))]


def test_kill_after_an_epochs_history_row_leaves_each_epoch_once_in_history_csv(
    shuffled: Killed,
) -> None:
    assert shuffled.rows_at_kill == ["0"]  # the row was written, its checkpoint was not
    assert history_epochs(shuffled.run) == ["0", "1"]


def test_finished_resumed_run_keeps_the_run_files_and_drops_its_checkpoint(
    shuffled: Killed,
) -> None:
    assert sorted(p.name for p in shuffled.run.iterdir()) == RUN_FILES


# -- refusals --------------------------------------------------------------------------------------


@pytest.fixture
def unfinished(paused: Path, tmp_path: Path) -> Path:
    shutil.copytree(paused, tmp_path / "run")
    return tmp_path / "run"


def test_rerun_with_another_batch_size_is_refused_naming_it(store: Path, unfinished: Path) -> None:
    args = [a if a != "32" else "64" for a in TRAIN]
    result = run_cli("train", store, *args, "--deterministic", "--out", unfinished)
    assert error_line(result) == (
        f"chunkfit: error: {unfinished}: the run was made with --batch-size 32, not 64; run the "
        "command the run "
        "was made with to resume it, pass --restart to start over, or use another --out"
    )


def test_rerun_without_deterministic_is_refused_naming_it(store: Path, unfinished: Path) -> None:
    result = run_cli("train", store, *TRAIN, "--out", unfinished)
    assert error_line(result).startswith(
        f"chunkfit: error: {unfinished}: the run was made with --deterministic on, not off;"
    )


def test_rerun_with_another_model_is_refused_naming_it(store: Path, unfinished: Path) -> None:
    result = run_cli(
        "train", store, *TRAIN, "--deterministic", "--model", "dilated-resnet", "--out", unfinished
    )
    assert error_line(result).startswith(
        f"chunkfit: error: {unfinished}: the run was made with --model baseline-cnn, not "
        "dilated-resnet;"
    )


def test_rerun_on_another_store_is_refused_naming_what_differs(
    unfinished: Path, tmp_path: Path
) -> None:
    other = make_store(tmp_path / "other.zarr", samples=SAMPLES + 100)
    result = run_cli("train", other, *TRAIN, "--deterministic", "--out", unfinished)
    assert error_line(result).startswith(
        f"chunkfit: error: {unfinished}: the run was made on another store (n_samples {SAMPLES} "
        f"there, {SAMPLES + 100} in this one);"
    )


def test_checkpoint_complete_but_not_yet_renamed_is_resumed(store: Path, unfinished: Path) -> None:
    """A kill between a checkpoint's state.json and its rename leaves it as checkpoint.tmp/."""
    shutil.rmtree(
        unfinished / "checkpoint.tmp", ignore_errors=True
    )  # the paused write's partial one
    (unfinished / "checkpoint").rename(unfinished / "checkpoint.tmp")
    result = run_cli("train", store, *TRAIN, "--deterministic", "--out", unfinished)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"resuming the run in {unfinished} from its checkpoint")
    assert json.loads((unfinished / "run.json").read_text())["finished"]


def test_rerun_with_other_compute_threads_resumes(store: Path, unfinished: Path) -> None:
    """Threads change how fast, not what, is trained: the run continues from its checkpoint."""
    result = run_cli(
        "train", store, *TRAIN, "--deterministic", "--compute-threads", "2", "--out", unfinished
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"resuming the run in {unfinished} from its checkpoint")
    run = json.loads((unfinished / "run.json").read_text())
    assert run["finished"] and run["threads"] == {
        "intra_op": 2,
        "inter_op": 1,
        "by": "--compute-threads",
    }


def test_rerun_with_other_steps_per_execution_resumes_and_ends_as_the_uninterrupted_run(
    store: Path, unfinished: Path, reference: Path
) -> None:
    """Batches per compiled step change how fast, not what, is trained: bit for bit the same
    weights."""
    result = run_cli(
        "train", store, *TRAIN, "--deterministic", "--steps-per-execution", "3", "--out", unfinished
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"resuming the run in {unfinished} from its checkpoint")
    assert (
        json.loads((unfinished / "run.json").read_text())["config"]["steps_per_execution_used"] == 3
    )
    ours, theirs = weights(unfinished), weights(reference)
    assert sorted(ours) == sorted(theirs)
    assert all(np.array_equal(ours[k], theirs[k]) for k in theirs)


def test_checkpoint_naming_a_setting_that_no_longer_identifies_a_run_resumes(
    store: Path, unfinished: Path
) -> None:
    """Checkpoints of earlier versions hold steps_per_execution in the run's identity; it is ignored
    now."""
    state_file = unfinished / "checkpoint" / "state.json"
    state = json.loads(state_file.read_text())
    state["run"]["config"]["steps_per_execution"] = 64
    state_file.write_text(json.dumps(state))
    result = run_cli("train", store, *TRAIN, "--deterministic", "--out", unfinished)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"resuming the run in {unfinished} from its checkpoint")


def test_refused_rerun_leaves_the_run_folder_as_it_was(store: Path, unfinished: Path) -> None:
    before = tree(unfinished)
    run_cli("train", store, *TRAIN, "--out", unfinished)
    assert tree(unfinished) == before


def test_finished_run_is_refused_suggesting_restart(store: Path, reference: Path) -> None:
    result = run_cli("train", store, *TRAIN, "--deterministic", "--out", reference)
    assert error_line(result) == (
        f"chunkfit: error: {reference}: the folder holds a finished run; pass --restart to delete "
        "it and train again, or use another --out"
    )


def test_resume_flag_with_nothing_to_resume_is_refused(store: Path, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    result = run_cli("train", store, *TRAIN, "--resume", "--out", tmp_path / "run")
    assert error_line(result) == (
        f"chunkfit: error: {tmp_path / 'run'}: there is no run to resume (no checkpoint in the "
        "folder); leave out --resume to start a new run"
    )


def test_resume_and_restart_together_are_refused(store: Path, tmp_path: Path) -> None:
    result = run_cli("train", store, *TRAIN, "--resume", "--restart", "--out", tmp_path / "run")
    assert error_line(result) == "chunkfit: error: give either --resume or --restart, not both"


def test_restart_deletes_the_old_run_and_trains_from_scratch(store: Path, unfinished: Path) -> None:
    args = [
        a if a != "2" else "1" for a in TRAIN
    ]  # one epoch, and not --deterministic: other settings are fine
    result = run_cli("train", store, *args, "--restart", "--out", unfinished, timeout=300)
    assert result.returncode == 0, result.stderr
    run = json.loads((unfinished / "run.json").read_text())
    assert (run["resumes"], len(run["epochs"]), sorted(p.name for p in unfinished.iterdir())) == (
        [],
        1,
        RUN_FILES,
    )


def _writable_again(folder: Path) -> None:
    for p in [folder, *folder.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


@pytest.fixture
def read_only(unfinished: Path) -> Iterator[Path]:
    for p in [unfinished, *unfinished.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    yield unfinished
    _writable_again(unfinished)


def test_read_only_run_folder_is_one_line_before_training(store: Path, read_only: Path) -> None:
    before = tree(read_only)
    result = run_cli("train", store, *TRAIN, "--deterministic", "--out", read_only, obey_modes=True)
    assert error_line(result) == (
        f"chunkfit: error: {read_only}: the run folder cannot be written (Permission denied); make "
        "it writable to resume the run, or use another --out"
    )
    assert tree(read_only) == before


@pytest.fixture(scope="module")
def full_disk(
    paused: Path, store: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, Path, dict[str, Any]]:
    """The unfinished run resumed with every file limited to 4 kB: its next checkpoint cannot be
    written."""
    run = tmp_path_factory.mktemp("full") / "run"
    shutil.copytree(paused, run)
    shutil.rmtree(run / "checkpoint.tmp")  # what the kill inside a write left: tidied by any resume
    before = tree(run / "checkpoint")
    result = run_cli(
        "train", store, *TRAIN, "--deterministic", "--out", run, file_size=4096, timeout=300
    )
    return result, run, before


def test_full_disk_while_writing_a_checkpoint_is_one_line_naming_the_intact_one(
    full_disk: Any, store: Path
) -> None:
    result, run, _ = full_disk
    assert error_line(result) == (
        f"chunkfit: error: {run}: a checkpoint cannot be written (File too large: the disk is full "
        "or a file-size "
        f"limit was hit); the checkpoint made in epoch 1/2 after 2 of {train_blocks(store)} blocks "
        f"is intact in {run}; free some space and run the same command to resume"
    )


def test_full_disk_while_writing_a_checkpoint_keeps_the_previous_one(full_disk: Any) -> None:
    _, run, before = full_disk
    assert tree(run / "checkpoint") == before
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint", "history.csv"]


# -- a store modified while training ---------------------------------------------------------------


def grown_run(backend: str, base: Path) -> tuple[Any, Path, Path]:
    """A run whose store gets 500 more samples while the run waits inside its second checkpoint
    write."""
    store, run = make_store(base / f"s{SUFFIX[backend]}"), base / "run"
    proc = start(store, run, env={checkpoint.PAUSE_HOOK: "2:600"})
    paused = run / "checkpoint.tmp" / checkpoint.PAUSED
    assert wait_for(paused.is_file, proc)
    with chunkfit.StoreWriter(
        store, channels=["x"], sample_rate=1.0, has_labels=False, append=True
    ) as w:
        w.write(np.zeros((500, 1), dtype=np.float32))
        w.add_segment(SAMPLES, SAMPLES + 500)
        w.commit()
    paused.unlink()  # the run goes on
    _, err = proc.communicate(timeout=300)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, "", err.decode())
    return result, store, run


def test_store_growing_while_training_stops_the_run_with_one_line(grown: Any) -> None:
    result, store, run = grown
    line = error_line(result)
    assert re.fullmatch(
        rf"chunkfit: error: {re.escape(str(store))}: the store changed while training \(its signal "
        r"had 2,000 "
        r"samples and now has 2,500\); training stopped; the checkpoint made in epoch 1/2 after "
        r"\d+ of \d+ blocks "
        rf"is intact in {re.escape(str(run))}; resume on the store as it was, or pass --restart to "
        "train on it as it is now",
        line,
    ), line


def test_store_growing_while_training_keeps_a_complete_checkpoint(grown: Any) -> None:
    _, _, run = grown
    assert sequence(run) >= 2
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint", "history.csv"]


def test_resuming_on_the_grown_store_is_refused(grown: Any) -> None:
    _, store, run = grown
    result = run_cli("train", store, *TRAIN, "--out", run)
    assert error_line(result).startswith(
        f"chunkfit: error: {run}: the run was made on another store (n_samples 2000 there, 2500 in "
        "this one);"
    )


# -- memory over a long run ------------------------------------------------------------------------

MEASURE = """
import json, resource, sys
import psutil
import chunkfit

process, rss, peak = psutil.Process(), {}, {}

def progress(p):
    if p.phase == "train" and p.block not in rss:
        rss[p.block] = process.memory_info().rss
        peak[p.block] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

chunkfit.fit("baseline-cnn", sys.argv[1], window=16, chunk=32, batch_size=32, mix=1, epochs=1,
             validation=0.05, out=sys.argv[2], checkpoint_every=10, progress=progress)
print(json.dumps({"rss": rss, "peak": peak}))
"""


def memory_run(base: Path) -> dict[str, dict[int, int]]:
    """Resident memory when each of about 120 one-batch blocks begins, in a fresh process."""
    store = make_store(base / "s.zarr", samples=4_000)
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(store), str(base / "run")],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.splitlines()[-1])
    return {kind: {int(k): v for k, v in by_block.items()} for kind, by_block in figures.items()}


def test_long_run_trains_over_a_hundred_blocks(memory: dict[str, dict[int, int]]) -> None:
    assert max(memory["rss"]) > 100


def test_resident_memory_at_block_100_is_within_5_percent_of_block_10(
    memory: dict[str, dict[int, int]],
) -> None:
    assert memory["rss"][100] <= 1.05 * memory["rss"][10], memory["rss"]


def test_peak_memory_at_block_100_is_within_5_percent_of_block_10(
    memory: dict[str, dict[int, int]],
) -> None:
    assert memory["peak"][100] <= 1.05 * memory["peak"][10], memory["peak"]


# -- the Python API: callbacks keep their state across a resume ------------------------------------


class Crash(Exception):
    """Stands in for a crash inside training."""


def stateful_callbacks(folder: Path) -> list[Any]:
    import keras

    return [
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=10, restore_best_weights=True),
        keras.callbacks.ReduceLROnPlateau(
            monitor="loss", min_delta=10.0, patience=1, factor=0.5, cooldown=1
        ),
        keras.callbacks.ModelCheckpoint(
            str(folder / "best.keras"), monitor="val_loss", save_best_only=True
        ),
    ]


def crash_in(epoch: int, batch: int) -> Any:
    import keras

    class CrashIn(keras.callbacks.Callback):
        def on_epoch_begin(self, e: int, logs: Any = None) -> None:
            self.epoch = e

        def on_train_batch_end(self, b: int, logs: Any = None) -> None:
            if (self.epoch, b) == (epoch, batch):
                raise Crash

    return CrashIn()


API = {
    "window": WINDOW,
    "chunk": 512,
    "mix": 1,
    "batch_size": 64,
    "epochs": 2,
    "validation": 0.2,
    "deterministic": True,
    "steps_per_execution": 1,
    "checkpoint_every": 1,
}


@pytest.fixture(scope="module")
def api_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[Any], list[Any], Any, Any, Path]:
    """The same run uninterrupted, and crashed in epoch 2 then resumed with new callback objects."""
    base = tmp_path_factory.mktemp("api")
    store = make_store(base / "s.zarr", samples=4_000)
    whole = stateful_callbacks(base)
    history = chunkfit.fit("baseline-cnn", store, **API, callbacks=whole, out=base / "whole")
    with pytest.raises(Crash):
        chunkfit.fit(
            "baseline-cnn",
            store,
            **API,
            callbacks=[*stateful_callbacks(base), crash_in(1, 20)],
            out=base / "crashed",
        )
    resumed = stateful_callbacks(base)
    again = chunkfit.fit(
        "baseline-cnn", store, **API, callbacks=resumed, out=base / "crashed", resume="resume"
    )
    return whole, resumed, history, again, base / "crashed"


@pytest.mark.backends
def test_python_api_crashed_run_resumes_inside_its_second_epoch(api_runs: Any) -> None:
    run = json.loads((api_runs[4] / "run.json").read_text())
    assert [(r["epoch"], r["position"] > 0) for r in run["resumes"]] == [(1, True)]


@pytest.mark.backends
def test_python_api_resume_restores_early_stopping_state(api_runs: Any) -> None:
    whole, resumed, _, _, _ = api_runs
    names = ("wait", "stopped_epoch", "best", "best_epoch")
    assert [getattr(resumed[0], n) for n in names] == [getattr(whole[0], n) for n in names]
    assert all(
        np.array_equal(a, b)
        for a, b in zip(resumed[0].best_weights, whole[0].best_weights, strict=True)
    )


@pytest.mark.backends
def test_python_api_resume_restores_reduce_lr_on_plateau_state(api_runs: Any) -> None:
    whole, resumed, _, _, _ = api_runs
    names = ("wait", "best", "cooldown_counter")
    assert [getattr(resumed[1], n) for n in names] == [getattr(whole[1], n) for n in names]
    assert (
        float(resumed[1].model.optimizer.learning_rate)
        == float(whole[1].model.optimizer.learning_rate)
        < 1e-3
    )


@pytest.mark.backends
def test_python_api_resume_restores_model_checkpoint_best(api_runs: Any) -> None:
    whole, resumed, _, _, _ = api_runs
    assert resumed[2].best == whole[2].best


@pytest.mark.backends
def test_python_api_resumed_history_equals_the_uninterrupted_one(api_runs: Any) -> None:
    _, _, history, again, _ = api_runs
    assert (again.epoch, again.history) == (history.epoch, history.history)


def test_python_api_resume_with_other_callbacks_is_refused(tmp_path: Path, api_runs: Any) -> None:
    store = make_store(tmp_path / "s.zarr", samples=4_000)
    with pytest.raises(Crash):
        chunkfit.fit(
            "baseline-cnn",
            store,
            **API,
            callbacks=[*stateful_callbacks(tmp_path), crash_in(0, 20)],
            out=tmp_path / "run",
        )
    with pytest.raises(
        chunkfit.errors.IncompatibleError,
        match="the run was made with the callbacks EarlyStopping, "
        "ReduceLROnPlateau, ModelCheckpoint, this call passes EarlyStopping;",
    ):
        chunkfit.fit(
            "baseline-cnn",
            store,
            **API,
            callbacks=stateful_callbacks(tmp_path)[:1],
            out=tmp_path / "run",
        )


def test_python_api_resume_without_a_run_folder_is_refused(store: Path) -> None:
    with pytest.raises(
        chunkfit.errors.UsageError, match=r"resume='resume' needs a run folder: pass out=RUN"
    ):
        chunkfit.fit("baseline-cnn", store, window=WINDOW, resume="resume")


def dropout_model() -> Any:
    """A model drawing random numbers while it trains: its Dropout layer's SeedGenerator state moves
    every step."""
    import keras

    keras.utils.set_random_seed(3)
    return keras.Sequential(
        [
            keras.Input((WINDOW, 1)),
            keras.layers.Conv1D(8, 5, activation="relu"),
            keras.layers.Dropout(0.5),
            keras.layers.Flatten(),
            keras.layers.Dense(2, activation="softmax"),
        ],
        name="dropout_cnn",
    )


@pytest.mark.backends
def test_python_api_resumed_dropout_model_ends_with_the_weights_of_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path / "s.zarr", samples=4_000)
    whole = chunkfit.fit(dropout_model(), store, **API, out=tmp_path / "whole").model
    with pytest.raises(Crash):
        chunkfit.fit(
            dropout_model(), store, **API, callbacks=[crash_in(1, 20)], out=tmp_path / "crashed"
        )
    resumed = chunkfit.fit(dropout_model(), store, **API, out=tmp_path / "crashed").model
    assert all(
        np.array_equal(a, b)
        for a, b in zip(resumed.get_weights(), whole.get_weights(), strict=True)
    )


@pytest.mark.backends
def test_python_api_resumed_augmented_run_ends_with_the_weights_of_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path / "s.zarr", samples=4_000)
    settings = {**API, "augment": "noise=20,gain=0.2,offset=0.1,flip,shift=4,mix=0.5"}
    whole = chunkfit.fit("baseline-cnn", store, **settings, out=tmp_path / "whole").model
    with pytest.raises(Crash):
        chunkfit.fit(
            "baseline-cnn", store, **settings, callbacks=[crash_in(1, 20)], out=tmp_path / "crashed"
        )
    resumed = chunkfit.fit("baseline-cnn", store, **settings, out=tmp_path / "crashed").model
    assert all(
        np.array_equal(a, b)
        for a, b in zip(resumed.get_weights(), whole.get_weights(), strict=True)
    )


def test_rerun_with_other_augmentation_is_refused_naming_it(tmp_path: Path) -> None:
    store = make_store(tmp_path / "s.zarr", samples=4_000)
    with pytest.raises(Crash):
        chunkfit.fit(
            "baseline-cnn",
            store,
            **API,
            augment="flip",
            callbacks=[crash_in(0, 20)],
            out=tmp_path / "run",
        )
    with pytest.raises(
        chunkfit.errors.IncompatibleError, match="the run was made with --augment flip, not none;"
    ):
        chunkfit.fit("baseline-cnn", store, **API, out=tmp_path / "run")


def test_a_mid_epoch_checkpoint_with_other_epoch_metrics_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """A checkpoint from a chunkfit that logged loss and accuracy only (4 metric variables) cannot
    carry its epoch's metric totals into today's metrics: refused, naming the way out, run kept."""
    store = make_store(tmp_path / "s.zarr", samples=4_000)
    with pytest.raises(Crash):
        chunkfit.fit(
            "baseline-cnn", store, **API, callbacks=[crash_in(0, 20)], out=tmp_path / "run"
        )
    folder = next(p for p in (tmp_path / "run").rglob("state.json")).parent
    arrays = dict(np.load(folder / "arrays.npz"))
    assert (
        sum(k.startswith("metrics.") for k in arrays) > 4
    )  # today's: loss, PR-AUC, precision, recall, accuracy
    kept = {
        k: v for k, v in arrays.items() if not k.startswith("metrics.") or int(k.split(".")[1]) < 4
    }
    np.savez(folder / "arrays.npz", **kept)
    state = json.loads((folder / "state.json").read_text())
    state["files"]["arrays.npz"] = (folder / "arrays.npz").stat().st_size
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(
        chunkfit.errors.IncompatibleError,
        match=r"the checkpoint was made mid-epoch by a chunkfit that logged other epoch metrics "
        r"\(4 "
        r"metric variables saved, \d+ now\); finish the run with that version, or pass --restart",
    ):
        chunkfit.fit("baseline-cnn", store, **API, out=tmp_path / "run")
    assert (folder / "state.json").exists()
