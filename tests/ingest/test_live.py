"""Live scoring: a stream piped into ``chunkfit ingest`` is committed as it arrives, and
``chunkfit predict --follow`` scores it beside the ingest, ending with the outputs of an offline
predict.

Every test runs real processes. None of them depends on timing: the writer holds the pipe open at
gates (files the test creates) and the tests wait on conditions (rows committed, a detection row)
with generous limits.
"""

from __future__ import annotations

import csv
import signal
from pathlib import Path

import numpy as np
import pytest
from livesupport import (
    Stream,
    assert_same_as_offline,
    committed,
    follow,
    follow_beside_a_stream,
    stream_ended_by_ctrl_c,
    stream_values,
    wait_for,
)
from scoring_support import Trained
from support import error_line, run_cli

import chunkfit
from chunkfit.store import journal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# -- ingest ----------------------------------------------------------------------------------------


def test_a_reader_sees_the_store_grow_while_the_stream_runs(
    tmp_path: Path, streams: list[Stream]
) -> None:
    store = tmp_path / "live.zarr"
    stream = Stream(tmp_path, store, [300, 200, 100], "--commit-every", "0.2")
    streams.append(stream)
    wait_for(lambda: committed(store) == 300, stream.ingest)
    first = committed(store)
    stream.go(1)
    wait_for(lambda: committed(store) == 500, stream.ingest)
    second = committed(store)
    assert stream.writer.poll() is None  # the writer still waits at its last gate
    stream.go(2)
    code, out, err = stream.finish()
    assert (code, err) == (0, "")
    assert (first, second) == (300, 500)
    assert out.startswith(f"created {store}: 600 samples at 100 Hz, 1 segment(s)")
    offline = tmp_path / "offline.zarr"
    assert (
        run_cli("ingest", offline, stream.gate / "stream.csv", "--time-column", "t").returncode == 0
    )
    with chunkfit.open_store(store) as s, chunkfit.open_store(offline) as o:
        np.testing.assert_array_equal(s.read(0, 600), o.read(0, 600))
        assert s.segments.tolist() == [[0, 600]]  # one recording across its commits
        assert s.sample_rate == o.sample_rate == 100.0
        [record] = s.attrs["sources"]
        assert (record["name"], record["rows"], record["sha256"]) == (
            "<stdin>",
            600,
            o.attrs["sources"][0]["sha256"],
        )
        for key in ("count", "min", "max"):
            assert s.attrs["stats"]["x"][key] == o.attrs["stats"]["x"][key]
        for key in ("mean", "std"):
            assert s.attrs["stats"]["x"][key] == pytest.approx(o.attrs["stats"]["x"][key], rel=1e-9)


def test_a_time_gap_in_the_stream_starts_a_new_segment_and_the_first_stays_whole(
    tmp_path: Path, streams: list[Stream]
) -> None:
    store = tmp_path / "live.zarr"
    stream = Stream(tmp_path, store, [300, 200], "--commit-every", "0.2", gap=True)
    streams.append(stream)
    wait_for(lambda: committed(store) == 300, stream.ingest)
    stream.go(1)
    code, _out, err = stream.finish()
    assert (code, err) == (0, "")
    with chunkfit.open_store(store) as s:
        assert s.segments.tolist() == [[0, 300], [300, 500]]


def test_a_stream_appended_to_a_store_becomes_one_new_segment_after_its_recordings(
    tmp_path: Path, streams: list[Stream]
) -> None:
    store = tmp_path / "live.zarr"
    (tmp_path / "old.csv").write_text("t,x\n" + "".join(f"{i / 100!r},{i}.5\n" for i in range(150)))
    assert run_cli("ingest", store, tmp_path / "old.csv", "--time-column", "t").returncode == 0
    stream = Stream(tmp_path, store, [300, 200], "--append", "--commit-every", "0.2")
    streams.append(stream)
    wait_for(lambda: committed(store) == 450, stream.ingest)
    stream.go(1)
    code, out, err = stream.finish()
    assert (code, err) == (0, "")
    assert out.startswith(f"appended {store}: 500 samples at 100 Hz, 1 segment(s)")
    with chunkfit.open_store(store) as s:
        assert s.segments.tolist() == [[0, 150], [150, 650]]
        np.testing.assert_array_equal(s.read(150, 650)[:, 0], stream_values(stream.gate))
        assert [r["name"] for r in s.attrs["sources"]] == [str(tmp_path / "old.csv"), "<stdin>"]
        assert s.attrs["stats"]["x"]["count"] == 650


def test_ctrl_c_on_a_stream_commits_the_rows_not_committed_yet(
    tmp_path: Path, streams: list[Stream]
) -> None:
    store = tmp_path / "live.zarr"
    stream = stream_ended_by_ctrl_c(tmp_path, store, streams)
    with chunkfit.open_store(store) as s:
        np.testing.assert_array_equal(s.read(0, s.n_samples)[:, 0], stream_values(stream.gate))
        assert s.segments.tolist() == [[0, 250]]


def test_readers_opening_all_the_time_never_see_a_commit_half_done_nor_disturb_the_stream(
    tmp_path: Path, streams: list[Stream]
) -> None:
    """A commit every 20 ms while this process opens the store as fast as it can: every open sees
    one commit or the next (never a mix read as damage), and no open takes a journal being set up or
    taken down for a dead writer's and rolls it back under the stream."""
    store = tmp_path / "busy.zarr"
    stream = Stream(tmp_path, store, [3000], "--commit-every", "0.02")
    streams.append(stream)
    seen: list[int] = []
    while stream.ingest.poll() is None:
        try:
            with chunkfit.open_store(store) as s:
                assert s.segments[-1, 1] == s.n_samples
                seen.append(s.n_samples)
        except (chunkfit.errors.StoreNotFoundError, chunkfit.errors.StoreBusyError):
            pass
    code, _out, err = stream.finish()
    assert (code, err) == (0, "")
    assert seen == sorted(seen) and len(set(seen)) >= 2, seen
    with chunkfit.open_store(store) as s:
        assert (s.n_samples, s.segments.tolist()) == (3000, [[0, 3000]])
        np.testing.assert_array_equal(s.read(0, 3000)[:, 0], stream_values(stream.gate))


def test_kill_9_between_commits_keeps_the_committed_rows_readable(
    tmp_path: Path, streams: list[Stream]
) -> None:
    store = tmp_path / "live.zarr"
    stream = Stream(tmp_path, store, [300, 200], "--commit-every", "0.2", hold=True)
    streams.append(stream)
    wait_for(lambda: committed(store) == 300, stream.ingest)
    stream.go(1)
    wait_for(lambda: stream.drained(1), stream.ingest)
    stream.ingest.kill()
    stream.ingest.wait(timeout=60)
    with chunkfit.open_store(store) as s:  # rolls back a commit the kill interrupted
        n = s.n_samples
        assert 300 <= n <= 500
        np.testing.assert_array_equal(s.read(0, n)[:, 0], stream_values(stream.gate)[:n])
        assert s.segments.tolist() == [[0, n]]
    assert not (store / journal.JOURNAL).exists()


# -- predict --follow ------------------------------------------------------------------------------


def test_follow_writes_detections_while_the_stream_runs_and_ends_equal_to_offline_predict(
    tmp_path: Path, streams: list[Stream], runs: Trained
) -> None:
    follow_beside_a_stream(tmp_path, runs.run, tmp_path / "live.zarr", streams)


def test_follow_of_a_stream_with_utc_times_writes_their_utc_columns_live(
    tmp_path: Path, streams: list[Stream], runs: Trained
) -> None:
    follow_beside_a_stream(tmp_path, runs.run, tmp_path / "live.zarr", streams, iso=True)
    with open(tmp_path / "follow.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    noon = np.datetime64("2024-05-01T12:00:00", "us")
    assert rows and all(
        r["start_utc"] == str(noon + np.timedelta64(round(float(r["start_s"]) * 1e6), "us")) + "Z"
        for r in rows
    )


def test_follow_of_a_store_that_does_not_grow_ends_after_idle(
    tmp_path: Path, runs: Trained
) -> None:
    store = tmp_path / "done.zarr"
    rng = np.random.default_rng(2)
    x = np.sin(np.arange(700)) + rng.normal(0.0, 0.2, 700)
    x[::31] += 0.5
    (tmp_path / "x.csv").write_text("x\n" + "\n".join(repr(float(v)) for v in x) + "\n")
    assert run_cli("ingest", store, tmp_path / "x.csv", "--rate", "100").returncode == 0
    proc = follow(tmp_path, runs.strided, store, "--idle", "1")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines()[-1].endswith("(followed until the store idle for 1 s)")
    assert_same_as_offline(tmp_path, runs.strided, store)


def test_follow_writes_only_the_detections_without_out(tmp_path: Path, runs: Trained) -> None:
    store = tmp_path / "done.zarr"
    x = np.sin(np.arange(500)) + np.random.default_rng(3).normal(0.0, 0.2, 500)
    (tmp_path / "x.csv").write_text("x\n" + "\n".join(repr(float(v)) for v in x) + "\n")
    assert run_cli("ingest", store, tmp_path / "x.csv", "--rate", "100").returncode == 0
    live = run_cli(
        "predict", runs.run, store, "--follow", "--idle", "1", "--events-out", "f.csv", cwd=tmp_path
    )
    assert live.returncode == 0, live.stderr
    offline = run_cli("predict", runs.run, store, "--events-out", "o.csv", cwd=tmp_path)
    assert offline.returncode == 0, offline.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done.zarr", "f.csv", "o.csv", "x.csv"]
    assert (tmp_path / "f.csv").read_bytes() == (tmp_path / "o.csv").read_bytes()


def test_ctrl_c_ends_follow_with_its_outputs_written(tmp_path: Path, runs: Trained) -> None:
    store = tmp_path / "done.zarr"
    (tmp_path / "x.csv").write_text(
        "x\n" + "\n".join(str(float(np.sin(i))) for i in range(400)) + "\n"
    )
    assert run_cli("ingest", store, tmp_path / "x.csv", "--rate", "100").returncode == 0
    proc = follow(tmp_path, runs.run, store, "--idle", "600")
    wait_for(lambda: any(tmp_path.glob(".follow.zarr.chunkfit-tmp-*")), proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines()[-1].endswith("(followed until Ctrl-C)")
    assert (tmp_path / "follow.zarr").exists() and (tmp_path / "follow.csv").exists()


# -- mistakes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1"])
def test_commit_every_that_is_not_positive_is_refused(tmp_path: Path, value: str) -> None:
    result = run_cli("ingest", tmp_path / "s.zarr", "-", "--commit-every", value, input=b"x\n1\n")
    assert result.returncode == 2
    assert error_line(result) == (
        "chunkfit: error: --commit-every must be a positive number of seconds, e.g. "
        f"--commit-every 1 (received {float(value)!r})"
    )
    assert not (tmp_path / "s.zarr").exists()


def test_commit_every_into_an_hdf5_store_is_refused_with_the_fix(tmp_path: Path) -> None:
    result = run_cli("ingest", tmp_path / "s.h5", "-", "--commit-every", "1", input=b"x\n1\n")
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: {tmp_path / 's.h5'}: --commit-every needs a .zarr store (an HDF5 store "
        "is copied whole at every commit); stream into NAME.zarr, or drop --commit-every to "
        "commit once at the end"
    )


def test_commit_every_for_files_is_refused(tmp_path: Path, small_csv: Path) -> None:
    result = run_cli("ingest", tmp_path / "s.zarr", small_csv, "--commit-every", "1")
    assert result.returncode == 2
    assert error_line(result) == (
        "chunkfit: error: --commit-every applies to a stream on standard input (-); drop it to "
        "ingest files in one transaction"
    )


def test_follow_of_a_store_that_never_appears_is_refused_after_idle(
    tmp_path: Path, runs: Trained
) -> None:
    result = run_cli(
        "predict",
        runs.run,
        "missing.zarr",
        "--follow",
        "--out",
        "s.zarr",
        "--idle",
        "0.5",
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert error_line(result) == (
        "chunkfit: error: missing.zarr: store not found after waiting 0.5 s (--idle); start "
        "`chunkfit ingest missing.zarr -` first, or check the path"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_idle_without_follow_is_refused(tmp_path: Path, runs: Trained) -> None:
    result = run_cli(
        "predict", runs.run, runs.store, "--out", "s.zarr", "--idle", "3", cwd=tmp_path
    )
    assert result.returncode == 2
    assert (
        error_line(result)
        == "chunkfit: error: --idle applies to --follow only; add --follow to score a growing store"
    )


def test_chunk_with_follow_is_refused(tmp_path: Path, runs: Trained) -> None:
    result = run_cli(
        "predict",
        runs.run,
        runs.store,
        "--follow",
        "--out",
        "s.zarr",
        "--chunk",
        "500",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert error_line(result) == (
        "chunkfit: error: --chunk does not apply to --follow, which scores what each commit adds; "
        "drop --chunk"
    )
    assert list(tmp_path.iterdir()) == []


def test_follow_with_an_idle_time_that_is_not_positive_is_refused(
    tmp_path: Path, runs: Trained
) -> None:
    result = run_cli(
        "predict", runs.run, runs.store, "--follow", "--out", "s.zarr", "--idle", "0", cwd=tmp_path
    )
    assert result.returncode == 2
    assert error_line(result) == (
        "chunkfit: error: --idle must be a positive number of seconds, e.g. --idle 1 (received 0.0)"
    )
