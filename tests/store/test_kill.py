"""``kill -9`` of a real ingest at states of its write: a new store never appears half-written and
an append commits whole or not at all, for both backends.

Each kill comes at a state the test sees on disk, never at a moment guessed in seconds: as the
transaction begins (its temporary or journal appears), while samples are being written (the first
chunks are on disk), and at the last moment before the commit (the writer's commit-pause hook, where
everything but the commit is written). The hook holds every ingest there until it is killed, so
every kill lands before the commit, however loaded the machine: each test proves the rollback.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from signal import SIGKILL

import numpy as np
import pytest
from support import SUFFIX, cli_command, cli_env, contents, raw_zarr_array, snapshot, write_csv

import chunkfit
from chunkfit import IngestOptions
from chunkfit.store import journal
from chunkfit.store.transaction import COMMIT_PAUSE_HOOK

ROWS_PER_BLOCK = 40_000
REPEATS = 60
STATES = ["begun", "writing", "committing"]
WRITTEN = 1 << 20  # bytes of samples in a temporary that say its writer is writing them


@pytest.fixture(scope="module")
def big_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 75 MB of CSV (2.4 million rows x 4 channels): many blocks and chunks to write."""
    rng = np.random.default_rng(0)
    block = "".join(
        f"{a:.5f},{b:.5f},{c:.5f},{d:.5f}\n" for a, b, c, d in rng.normal(size=(ROWS_PER_BLOCK, 4))
    )
    path = tmp_path_factory.mktemp("kill") / "big.csv"
    with open(path, "w") as f:
        f.write("a,b,c,d\n")
        f.writelines(block for _ in range(REPEATS))
    return path


def _kill_when(args: list[str], cwd: Path, reached: Callable[[Path], bool]) -> None:
    """Start ``chunkfit ARGS`` with its commit held at the test hook, and SIGKILL it as soon as
    ``reached(flag)`` holds (``flag``: the file the hook creates as it holds the commit). It must
    still be running then: the kill landed before the commit."""
    flag = cwd.parent / f"{cwd.name}-commit-held"
    proc = subprocess.Popen(
        cli_command(*args),
        cwd=cwd,
        env={**cli_env(), COMMIT_PAUSE_HOOK: f"{flag}:3600"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 600
    try:
        while not reached(flag) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, f"the ingest ended before the state: {proc.poll()}"
        assert reached(flag), "the ingest never reached the state"
    finally:
        proc.kill()
        _, err = proc.communicate()
        flag.unlink(missing_ok=True)
    assert proc.returncode == -SIGKILL, err.decode()
    assert b"Traceback" not in err, err.decode()


def _temporaries(store: Path) -> list[Path]:
    """The temporaries of writers of ``store`` (a new store's, or an HDF5 append's copy)."""
    return list(store.parent.glob(f".{store.name}.chunkfit-tmp-*"))


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _new_store_state(store: Path, state: str) -> Callable[[Path], bool]:
    """When the ingest of the new ``store`` is in ``state``."""

    def reached(flag: Path) -> bool:
        if state == "committing":
            return flag.exists()
        found = _temporaries(store)
        if state == "begun":
            return bool(found)
        return any(_bytes(t) > WRITTEN for t in found)  # writing

    return reached


def _append_state(store: Path, state: str) -> Callable[[Path], bool]:
    """When the append to ``store`` is in ``state``: a zarr append writes into the store under its
    journal, an HDF5 append into a copy of it."""
    before = _bytes(store)

    def reached(flag: Path) -> bool:
        if state == "committing":
            return flag.exists()
        if store.is_dir():
            if state == "begun":
                return (store / journal.JOURNAL / journal.MANIFEST).exists()
            return _bytes(store / "signal") > before + WRITTEN  # writing
        found = _temporaries(store)
        if state == "begun":
            return bool(found)
        return any(_bytes(t) > before + WRITTEN for t in found)  # writing

    return reached


@pytest.mark.slow
@pytest.mark.parametrize("state", STATES)
def test_killed_ingest_of_a_new_store_leaves_no_store(
    tmp_path: Path, backend: str, big_csv: Path, state: str
) -> None:
    store = tmp_path / f"new{SUFFIX[backend]}"
    _kill_when(
        ["ingest", store.name, str(big_csv), "--rate", "10"],
        tmp_path,
        _new_store_state(store, state),
    )
    assert not store.exists()
    assert _temporaries(store)  # what the killed writer left; the next one removes it


@pytest.mark.slow
def test_ingest_after_a_killed_one_succeeds_and_clears_its_temporary(
    tmp_path: Path, backend: str, big_csv: Path
) -> None:
    store = tmp_path / f"new{SUFFIX[backend]}"
    _kill_when(
        ["ingest", store.name, str(big_csv), "--rate", "10"],
        tmp_path,
        _new_store_state(store, "writing"),
    )
    assert _temporaries(store)
    small = write_csv(tmp_path / "small.csv", np.ones((5, 4)), names=["a", "b", "c", "d"])
    chunkfit.ingest(store, [str(small)], IngestOptions(rate=10.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([store.name, "small.csv"])


@pytest.fixture
def base_store(tmp_path: Path, backend: str) -> Path:
    """A small store with the big CSV's channels, two segments and events, to append to."""
    rng = np.random.default_rng(5)
    parts = [
        write_csv(tmp_path / f"base{i}.csv", rng.normal(size=(300, 4)), names=["a", "b", "c", "d"])
        for i in range(2)
    ]
    events = tmp_path / "events.txt"
    events.write_text("5\n450\n")
    store = tmp_path / f"base{SUFFIX[backend]}"
    chunkfit.ingest(store, [str(p) for p in parts], IngestOptions(rate=10.0, events=str(events)))
    return store


@pytest.mark.slow
@pytest.mark.parametrize("state", STATES)
def test_killed_append_leaves_the_store_exactly_as_before(
    base_store: Path, big_csv: Path, state: str
) -> None:
    before_files, before = snapshot(base_store), contents(base_store)
    _kill_when(
        ["ingest", "--append", base_store.name, str(big_csv), "--rate", "10"],
        base_store.parent,
        _append_state(base_store, state),
    )
    after = contents(base_store)  # opening rolls back what the killed append left
    np.testing.assert_array_equal(after["signal"], before["signal"])
    np.testing.assert_array_equal(after["segments"], before["segments"])
    np.testing.assert_array_equal(after["events"], before["events"])
    assert after["attrs"] == before["attrs"]
    assert snapshot(base_store) == before_files


@pytest.mark.slow
def test_killed_zarr_append_is_rolled_back_in_the_raw_hierarchy(
    tmp_path: Path, big_csv: Path
) -> None:
    rng = np.random.default_rng(6)
    src = write_csv(tmp_path / "base.csv", rng.normal(size=(1000, 4)), names=["a", "b", "c", "d"])
    store = tmp_path / "base.zarr"
    chunkfit.ingest(store, [str(src)], IngestOptions(rate=10.0))
    before = snapshot(store)
    raw_before = raw_zarr_array(store, "signal")[:]
    journal_manifest = store / journal.JOURNAL / journal.MANIFEST
    _kill_when(
        ["ingest", "--append", store.name, str(big_csv), "--rate", "10"],
        tmp_path,
        _append_state(store, "writing"),
    )
    assert journal_manifest.exists()  # the append was under way
    chunkfit.open_store(store).close()
    signal = raw_zarr_array(store, "signal")
    assert signal.shape == (1000, 4)
    np.testing.assert_array_equal(signal[:], raw_before)
    np.testing.assert_array_equal(raw_zarr_array(store, "segments")[:], [[0, 1000]])
    assert snapshot(store) == before
