"""``kill -9`` of a real ingest into an ``s3://`` store at the last moment before its commit (every
chunk written, the root ``zarr.json`` not): a new store stays invisible and ``--repair`` removes its
objects; a killed append leaves the committed store, and the next append takes over."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from s3support import s3fs_client
from support import cli_command, cli_env, error_line, make_store, run_cli, write_csv

import chunkfit
from chunkfit.store.transaction import COMMIT_PAUSE_HOOK

ROWS = 200_000


@pytest.fixture(scope="module")
def csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(3)
    return write_csv(
        tmp_path_factory.mktemp("s3kill") / "big.csv", rng.normal(size=(ROWS, 2)), names=["a", "b"]
    )


def _kill_before_the_commit(args: list[str], flag: Path) -> None:
    """Run ``chunkfit ARGS`` until every chunk and document of its transaction is on the server and
    only the root ``zarr.json`` that commits them is left to write (the writer's test hook), then
    ``kill -9`` it: the latest moment a kill can come, whatever the load on the machine."""
    env = {**cli_env(), COMMIT_PAUSE_HOOK: f"{flag}:300"}
    proc = subprocess.Popen(
        cli_command(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 240
    try:
        while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert flag.exists(), f"the ingest did not reach its commit: {proc.poll()=}"
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert b"Traceback" not in err, err.decode()


def _chunks(bucket: str, prefix: str) -> list[str]:
    fs = s3fs_client()
    fs.invalidate_cache()
    return [k for k in fs.find(f"{bucket}/{prefix}") if "/signal/c/" in k]


def test_killed_new_s3_ingest_leaves_no_store_and_repair_removes_its_objects(
    bucket: str, csv: Path
) -> None:
    url = f"s3://{bucket}/k.zarr"
    _kill_before_the_commit(
        ["ingest", url, str(csv), "--rate", "10", "--chunk-samples", "256"], csv.with_name("k1")
    )
    assert len(_chunks(bucket, "k.zarr")) == -(-ROWS // 256)  # all written, none committed
    assert error_line(run_cli("info", url)) == (
        f"chunkfit: error: {url}: store not found: it holds objects of an unfinished ingest, but "
        f"no committed store; remove them with `chunkfit ingest --repair {url}`"
    )
    result = run_cli("ingest", "--repair", url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{url}: removed ") and result.stdout.rstrip().endswith(
        "no store was there"
    )
    assert s3fs_client().find(f"{bucket}/k.zarr") == []


def test_new_s3_ingest_after_a_killed_one_replaces_its_leftovers(bucket: str, csv: Path) -> None:
    url = f"s3://{bucket}/k.zarr"
    args = ["ingest", url, str(csv), "--rate", "10", "--chunk-samples", "256"]
    _kill_before_the_commit(args, csv.with_name("k2"))
    result = run_cli("ingest", url, str(csv), "--rate", "10", "--chunk-samples", "65536")
    assert result.returncode == 0, result.stderr
    with chunkfit.open_store(url) as s:
        assert (s.n_samples, s.chunk_samples) == (ROWS, 65536)
    chunks = s3fs_client().find(f"{bucket}/k.zarr/signal/c")
    assert len(chunks) == -(-ROWS // 65536)  # the killed ingest's 256-sample chunks are gone


def test_xarray_sees_only_the_committed_rows_after_a_killed_s3_append(
    bucket: str, csv: Path
) -> None:
    xr = pytest.importorskip("xarray")
    from chunkfit.store.remote import storage_options

    url = f"s3://{bucket}/x.zarr"
    sig = np.random.default_rng(0).normal(size=(1000, 2)).astype(np.float32)
    make_store(url, sig, channels=["a", "b"], rate=10.0, chunk=4096)
    _kill_before_the_commit(
        ["ingest", "--append", url, str(csv), "--rate", "10"], csv.with_name("x")
    )
    assert len(_chunks(bucket, "x.zarr")) == -(
        -(1000 + ROWS) // 4096
    )  # the appended rows are on the server
    ds = xr.open_zarr(url, storage_options=storage_options())
    assert ds["signal"].shape == (1000, 2)
    np.testing.assert_array_equal(ds["signal"].values, sig)


def test_killed_s3_append_leaves_the_committed_store_and_the_next_append_succeeds(
    bucket: str, csv: Path
) -> None:
    url = f"s3://{bucket}/a.zarr"
    sig = np.random.default_rng(0).normal(size=(1000, 2)).astype(np.float32)
    make_store(url, sig, channels=["a", "b"], rate=10.0, chunk=4096)
    _kill_before_the_commit(
        ["ingest", "--append", url, str(csv), "--rate", "10"], csv.with_name("a")
    )
    with chunkfit.open_store(url) as s:
        assert s.n_samples == 1000
        np.testing.assert_array_equal(s.read(0, 1000), sig)
    result = run_cli("ingest", "--append", url, str(csv), "--rate", "10")
    assert result.returncode == 0, result.stderr
    with chunkfit.open_store(url) as s:
        assert s.n_samples == 1000 + ROWS
        np.testing.assert_array_equal(s.read(0, 1000), sig)
