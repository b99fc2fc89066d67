"""``kill -9`` at random moments of a real ingest: a new store never appears half-written and an
append commits whole or not at all, for both backends.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from support import SUFFIX, cli_command, cli_env, contents, raw_zarr_array, snapshot, write_csv

import chunkfit
from chunkfit import IngestOptions
from chunkfit.store import journal

KILLS = 3  # moments per backend and mode, spread over a whole run with a seeded jitter
ROWS_PER_BLOCK = 40_000
REPEATS = 60


@pytest.fixture(scope="module")
def big_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 75 MB of CSV (2.4 million rows x 4 channels): a couple of seconds of ingest."""
    rng = np.random.default_rng(0)
    block = "".join(
        f"{a:.5f},{b:.5f},{c:.5f},{d:.5f}\n" for a, b, c, d in rng.normal(size=(ROWS_PER_BLOCK, 4))
    )
    path = tmp_path_factory.mktemp("kill") / "big.csv"
    with open(path, "w") as f:
        f.write("a,b,c,d\n")
        f.writelines(block for _ in range(REPEATS))
    return path


@pytest.fixture(scope="module")
def full_run_seconds(big_csv: Path) -> float:
    """How long one whole ingest of ``big_csv`` takes here; kill moments are spread over it."""
    store = big_csv.parent / "reference.zarr"
    started = time.monotonic()
    result = subprocess.run(
        cli_command("ingest", str(store), str(big_csv), "--rate", "10"),
        check=False,
        env=cli_env(),
        capture_output=True,
    )
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    with chunkfit.open_store(store) as s:
        assert s.n_samples == ROWS_PER_BLOCK * REPEATS
    return seconds


def _kill_after(
    args: list[str], cwd: Path, seconds: float, *, once: Callable[[], bool] | None = None
) -> bool:
    """Start ``chunkfit ARGS`` and SIGKILL it ``seconds`` later (counted from when ``once()`` holds,
    if given); True if it had already finished by then."""
    proc = subprocess.Popen(
        cli_command(*args),
        cwd=cwd,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    while once is not None and not once() and proc.poll() is None:
        time.sleep(0.01)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass
    finished = proc.poll() is not None
    proc.kill()
    proc.wait()
    if finished:
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    return finished


def _moment(full_run_seconds: float, k: int, seed: int) -> float:
    """The k-th of KILLS moments: evenly over the run plus a seeded jitter, last ones near the commit."""
    jitter = random.Random(seed * 1000 + k).uniform(-0.5, 0.5)
    return max(0.05, full_run_seconds * (k + 0.5 + jitter) / KILLS)


@pytest.mark.slow
@pytest.mark.parametrize("k", range(KILLS))
def test_killed_ingest_of_a_new_store_leaves_no_store(
    tmp_path: Path, backend: str, big_csv: Path, full_run_seconds: float, k: int
) -> None:
    store = tmp_path / f"new{SUFFIX[backend]}"
    _kill_after(
        ["ingest", store.name, str(big_csv), "--rate", "10"],
        tmp_path,
        _moment(full_run_seconds, k, 1),
    )
    if store.exists():  # killed after its commit point (or it finished first): then it is complete
        with chunkfit.open_store(store) as s:
            assert s.n_samples == ROWS_PER_BLOCK * REPEATS


@pytest.mark.slow
def test_ingest_after_a_killed_one_succeeds_and_clears_its_temporary(
    tmp_path: Path, backend: str, big_csv: Path, full_run_seconds: float
) -> None:
    store = tmp_path / f"new{SUFFIX[backend]}"

    def temporary_exists() -> bool:  # the killed writer's, named after its pid
        return any(p.name.startswith(f".{store.name}.chunkfit-tmp-") for p in tmp_path.iterdir())

    assert not _kill_after(
        ["ingest", store.name, str(big_csv), "--rate", "10"], tmp_path, 0.2, once=temporary_exists
    )
    assert temporary_exists()
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
@pytest.mark.parametrize("k", range(KILLS))
def test_killed_append_leaves_the_store_exactly_as_before(
    base_store: Path, big_csv: Path, full_run_seconds: float, k: int
) -> None:
    before_files, before = snapshot(base_store), contents(base_store)
    _kill_after(
        ["ingest", "--append", base_store.name, str(big_csv), "--rate", "10"],
        base_store.parent,
        _moment(full_run_seconds, k, 2),
    )
    after = contents(base_store)  # opening rolls back what the killed append left
    if after["signal"].shape[0] != 600:  # killed after its commit point: then it is whole
        assert after["signal"].shape[0] == 600 + ROWS_PER_BLOCK * REPEATS
        np.testing.assert_array_equal(after["signal"][:600], before["signal"])
        assert after["segments"].tolist() == [
            *before["segments"].tolist(),
            [600, after["signal"].shape[0]],
        ]
        return
    np.testing.assert_array_equal(after["signal"], before["signal"])
    np.testing.assert_array_equal(after["segments"], before["segments"])
    np.testing.assert_array_equal(after["events"], before["events"])
    assert after["attrs"] == before["attrs"]
    assert snapshot(base_store) == before_files


@pytest.mark.slow
def test_killed_zarr_append_is_rolled_back_in_the_raw_hierarchy(
    tmp_path: Path, big_csv: Path, full_run_seconds: float
) -> None:
    rng = np.random.default_rng(6)
    src = write_csv(tmp_path / "base.csv", rng.normal(size=(1000, 4)), names=["a", "b", "c", "d"])
    store = tmp_path / "base.zarr"
    chunkfit.ingest(store, [str(src)], IngestOptions(rate=10.0))
    before = snapshot(store)
    raw_before = raw_zarr_array(store, "signal")[:]
    journal_manifest = store / journal.JOURNAL / journal.MANIFEST
    assert not _kill_after(
        ["ingest", "--append", store.name, str(big_csv), "--rate", "10"],
        tmp_path,
        0.3,
        once=journal_manifest.exists,
    )
    assert journal_manifest.exists()  # the append was under way
    chunkfit.open_store(store).close()
    signal = raw_zarr_array(store, "signal")
    assert signal.shape == (1000, 4)
    np.testing.assert_array_equal(signal[:], raw_before)
    np.testing.assert_array_equal(raw_zarr_array(store, "segments")[:], [[0, 1000]])
    assert snapshot(store) == before
