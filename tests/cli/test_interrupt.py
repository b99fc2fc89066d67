"""Ctrl-C (SIGINT) in real ``python -m chunkfit`` processes: exit 130, one line on what was kept.

Each test waits for a state of the process (TensorFlow loaded, a checkpoint or a temporary output
on disk) before it sends SIGINT, never for a number of seconds.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from scoring_support import WINDOW, Trained
from support import cli_command, cli_env, run_cli

import chunkfit
from chunkfit.store.journal import JOURNAL
from chunkfit.store.replacecommit import TMP_MARK
from chunkfit.synth import SynthSpec, balanced_anomalies, synth

pytestmark = pytest.mark.slow

BIG = 400_000  # samples: scoring or an epoch on it lasts well past the moment SIGINT is sent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store like the scoring runs' training store (channel ``x``, 1 Hz), only longer."""
    path = tmp_path_factory.mktemp("big") / "big.zarr"
    synth(path, SynthSpec(samples=BIG, anomalies=balanced_anomalies(BIG, WINDOW), seed=3))
    return path


def _until(proc: subprocess.Popen[bytes], ready: Callable[[], bool]) -> None:
    """Wait for ``ready()``; fails the test if the process ends first."""
    while not ready():
        try:
            proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"the process ended (exit {proc.returncode}) before the state")


def _tensorflow_loaded(proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
    maps = Path(f"/proc/{proc.pid}/maps")
    return lambda: "libtensorflow_framework" in maps.read_text()


def _interrupt(
    args: list[str], ready: Callable[[subprocess.Popen[bytes]], Callable[[], bool]], cwd: Path
) -> tuple[int, str, str]:
    proc = subprocess.Popen(
        cli_command(*args),
        cwd=cwd,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Pipes drained meanwhile, so a chatty process never blocks on a full pipe.
        out: list[bytes] = []
        err: list[bytes] = []
        readers = [
            threading.Thread(target=lambda s=s, b=b: b.append(s.read()))  # type: ignore[misc]
            for s, b in ((proc.stdout, out), (proc.stderr, err))
        ]
        for r in readers:
            r.start()
        _until(proc, ready(proc))
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=300)
        for r in readers:
            r.join()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, out[0].decode(), err[0].decode()


def test_train_interrupted_after_a_checkpoint_exits_130_naming_the_resume_command(
    big: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    args = ["train", str(big), "--window", str(WINDOW), "--chunk", "2000", "--epochs", "50"]
    args += ["--checkpoint-every", "1", "--out", str(run)]
    state = run / "checkpoint" / "state.json"
    code, _, err = _interrupt(args, lambda proc: state.exists, tmp_path)
    assert code == 130, err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"chunkfit: interrupted: the run folder {re.escape(str(run))} keeps its checkpoint "
        rf"\(\d+ of 50 epoch\(s\) done\); resume with: chunkfit " + re.escape(" ".join(args)),
        line,
    ), line
    assert state.exists()


def test_train_interrupted_before_any_checkpoint_says_nothing_was_kept(
    big: Path, tmp_path: Path
) -> None:
    args = ["train", str(big), "--window", str(WINDOW), "--chunk", "2000", "--epochs", "50"]
    code, _, err = _interrupt(args, _tensorflow_loaded, tmp_path)
    assert code == 130, err
    line = err.strip().splitlines()[-1]
    # No --out: the command to start again names the folder this run would have used.
    assert re.fullmatch(
        r"chunkfit: interrupted: no checkpoint had been written, so nothing was kept; start "
        rf"again with: chunkfit {re.escape(' '.join(args))} --out runs/\d{{8}}-\d{{6}}",
        line,
    ), line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_predict_interrupted_writes_nothing_and_keeps_an_existing_output(
    runs: Trained, big: Path, tmp_path: Path
) -> None:
    scores, detections = tmp_path / "scores.zarr", tmp_path / "detections.csv"
    detections.write_text("kept\n")
    args = ["predict", str(runs.run), str(big), "--out", str(scores)]
    args += ["--events-out", str(detections), "--overwrite", "--chunk", "2000"]
    temporary = f".{scores.name}.chunkfit-tmp-"
    code, out, err = _interrupt(
        args, lambda proc: lambda: any(temporary in p.name for p in tmp_path.iterdir()), tmp_path
    )
    assert (code, out) == (130, ""), err
    assert err.splitlines() == [
        f"chunkfit: interrupted: {scores} not written; {detections} left unchanged"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["detections.csv"]
    assert detections.read_text() == "kept\n"


def test_evaluate_interrupted_exits_130_having_written_nothing(
    runs: Trained, big: Path, tmp_path: Path
) -> None:
    plot = tmp_path / "eval.png"
    args = ["evaluate", str(runs.run), str(big), "--plot", str(plot), "--chunk", "2000"]
    code, out, err = _interrupt(args, _tensorflow_loaded, tmp_path)
    assert (code, out) == (130, ""), err
    assert err.splitlines() == ["chunkfit: interrupted: nothing was written (the plot comes last)"]
    assert not plot.exists()


def test_train_interrupted_on_a_terminal_stops_its_progress_bar(big: Path, tmp_path: Path) -> None:
    """Through a pseudo-terminal, where the progress bar is drawn: after Ctrl-C the cursor is shown
    again, the bar erased, and the last line is the interruption's."""
    run = tmp_path / "run"
    args = ["train", str(big), "--window", str(WINDOW), "--chunk", "2000", "--epochs", "50"]
    args += ["--checkpoint-every", "1", "--out", str(run)]
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        cli_command(*args),
        cwd=tmp_path,
        env={**cli_env(), "TERM": "xterm", "COLUMNS": "100"},
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    screen: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                return
            if not data:
                return
            screen.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        state = run / "checkpoint" / "state.json"
        _until(proc, lambda: state.exists() and b"\x1b[?25l" in b"".join(screen))
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=300)
        reader.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = b"".join(screen).decode(errors="replace")
    assert code == 130, text
    after_bar = text[text.rindex("\x1b[?25l") :]
    assert "\x1b[?25h" in after_bar  # the cursor the bar hid is shown again
    lines = [ANSI.sub("", line).strip() for line in text.replace("\r", "\n").split("\n")]
    assert [line for line in lines if line][-1].startswith(
        f"chunkfit: interrupted: the run folder {run} keeps its checkpoint"
    )


ROWS = 100_000  # rows of the store an append extends
APPENDED = 40 * ROWS  # rows of the big file: parsing them lasts well past the first chunk written


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small CSV of two channels and a big one (about 30 MB) made of 40 copies of its rows."""
    folder = tmp_path_factory.mktemp("csv")
    rows = "".join(f"{i % 1000},{i % 777}\n" for i in range(ROWS))
    small, large = folder / "small.csv", folder / "big.csv"
    small.write_text("a,b\n" + rows)
    with large.open("w") as f:
        f.write("a,b\n")
        for _ in range(APPENDED // ROWS):
            f.write(rows)
    return small, large


@contextmanager
def _held_open(fifo: Path, source: Path) -> Iterator[None]:
    """Write ``source`` into the named pipe ``fifo`` and hold it open until the block ends."""
    ended = threading.Event()

    def feed() -> None:
        with fifo.open("wb") as f:
            try:
                f.write(source.read_bytes())
                f.flush()
            except BrokenPipeError:
                return
            ended.wait(timeout=600)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        yield
    finally:
        ended.set()
        feeder.join()


def _chunks(folder: Path) -> set[str]:
    """The chunk indices along time of a zarr store's signal (empty while it has none)."""
    try:
        return {p.name for p in (folder / "signal" / "c").iterdir()}
    except FileNotFoundError:
        return set()


def test_ingest_of_a_file_interrupted_mid_append_exits_130_keeping_the_store_as_committed(
    sources: tuple[Path, Path], tmp_path: Path
) -> None:
    small, large = sources
    store = tmp_path / "s.zarr"
    assert run_cli("ingest", store, small, "--rate", "100").returncode == 0
    before = _chunks(store)
    with chunkfit.open_store(store) as s:
        committed = s.read(0, ROWS)

    def writing(proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
        # the append's journal is there and it has written a chunk past the committed ones
        return lambda: (store / JOURNAL).exists() and bool(_chunks(store) - before)

    # The big file arrives through a pipe held open after its last row: the append writes what it
    # read, then waits for more, so it is caught mid-append whatever the machine's speed.
    fifo = tmp_path / "big.csv"
    os.mkfifo(fifo)
    with _held_open(fifo, large):
        code, out, err = _interrupt(
            ["ingest", str(store), str(fifo), "--append"], writing, tmp_path
        )
    assert (code, out) == (130, ""), err
    assert err.splitlines() == [f"chunkfit: interrupted: {store} left unchanged"]
    assert not (store / JOURNAL).exists()  # rolled back by the interrupted process itself
    with chunkfit.open_store(store) as s:
        assert (s.n_samples, s.channels, s.segments.tolist()) == (ROWS, ["a", "b"], [[0, ROWS]])
        np.testing.assert_array_equal(s.read(0, ROWS), committed)
    info = run_cli("info", store)
    assert info.returncode == 0 and "samples      100,000" in info.stdout, info.stderr


def test_ingest_of_a_file_into_a_new_store_interrupted_exits_130_leaving_no_store(
    sources: tuple[Path, Path], tmp_path: Path
) -> None:
    _, large = sources
    store = tmp_path / "s.zarr"

    def writing(proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
        # the store's first chunk is on disk, in the temporary that becomes the store when complete
        return lambda: bool(_chunks(tmp_path / f".{store.name}{TMP_MARK}{proc.pid}"))

    # Through a pipe held open after its last row, as above: however fast the machine, the
    # ingest is still running when its first chunk is seen.
    fifo = tmp_path.parent / f"{tmp_path.name}-big.csv"
    os.mkfifo(fifo)
    with _held_open(fifo, large):
        code, out, err = _interrupt(
            ["ingest", str(store), str(fifo), "--rate", "100"], writing, tmp_path
        )
    fifo.unlink()
    assert (code, out) == (130, ""), err
    assert err.splitlines() == [f"chunkfit: interrupted: {store} not written"]
    assert list(tmp_path.iterdir()) == []  # no store, no temporary
