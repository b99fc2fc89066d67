"""A live stream into an ``s3://`` store: committed as it arrives (each commit an append under the
store's lease, its root ``zarr.json`` written last), one recording across its commits, and a
``kill -9`` or Ctrl-C loses nothing committed. Real processes against the tests' own S3 server on
loopback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from livesupport import (
    Stream,
    committed,
    follow_beside_a_stream,
    stream_ended_by_ctrl_c,
    stream_values,
    wait_for,
)
from scoring_support import Trained
from support import error_line, run_cli

import chunkfit
from chunkfit.config import IngestOptions
from chunkfit.ingest import live
from chunkfit.store.remote import Remote, upload_tree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_reader_sees_an_s3_store_grow_and_a_kill_9_keeps_what_was_committed(
    tmp_path: Path, bucket: str, streams: list[Stream]
) -> None:
    url = f"s3://{bucket}/live.zarr"
    stream = Stream(tmp_path, url, [300, 200], "--commit-every", "0.2", hold=True)
    streams.append(stream)
    wait_for(lambda: committed(url) == 300, stream.ingest)
    stream.go(1)
    wait_for(
        lambda: committed(url) == 500, stream.ingest
    )  # a second commit: the recording extended
    stream.ingest.kill()
    stream.ingest.wait(timeout=60)
    with chunkfit.open_store(url) as s:
        assert (s.n_samples, s.segments.tolist()) == (500, [[0, 500]])
        np.testing.assert_array_equal(s.read(0, 500)[:, 0], stream_values(stream.gate))
        assert [r["name"] for r in s.attrs["sources"]] == ["<stdin>"]
    # The next writer is not kept out: no lease is held between commits (and a killed holder's
    # lease on this host is taken over).
    more = tmp_path / "more.csv"
    more.write_text("t,x\n" + "".join(f"{(600 + i) / 100!r},{i}.5\n" for i in range(50)))
    result = run_cli("ingest", "--append", url, more, "--time-column", "t")
    assert result.returncode == 0, result.stderr
    with chunkfit.open_store(url) as s:
        assert (s.n_samples, s.segments.tolist()) == (550, [[0, 500], [500, 550]])


def test_a_stream_into_s3_ended_by_ctrl_c_commits_the_rows_not_committed_yet_as_a_local_one_does(
    tmp_path: Path, bucket: str, streams: list[Stream]
) -> None:
    url = f"s3://{bucket}/live.zarr"
    stream = stream_ended_by_ctrl_c(tmp_path, url, streams)
    local = tmp_path / "offline.zarr"
    assert (
        run_cli("ingest", local, stream.gate / "stream.csv", "--time-column", "t").returncode == 0
    )
    with chunkfit.open_store(url) as s, chunkfit.open_store(local) as o:
        assert s.segments.tolist() == [[0, 250]]
        np.testing.assert_array_equal(s.read(0, 250), o.read(0, 250))
        assert s.sample_rate == o.sample_rate == 100.0


def test_a_stream_into_s3_commits_every_10_s_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each commit on object storage is requests one after another and a rewrite of every array's
    last chunk (billed PUTs): a tenth as often as into a local store, unless --commit-every says."""
    monkeypatch.setattr(live, "_stdin_is_stream", lambda: True)
    assert live.commit_interval("s3://b/live.zarr", ["-"], IngestOptions()) == 10.0
    assert live.commit_interval("live.zarr", ["-"], IngestOptions()) == 1.0
    assert live.commit_interval("s3://b/live.zarr", ["-"], IngestOptions(commit_every=0.5)) == 0.5


def test_follow_of_an_s3_store_scores_the_stream_as_committed_and_equals_offline_predict(
    tmp_path: Path, bucket: str, streams: list[Stream], runs: Trained
) -> None:
    """``predict --follow`` of a store a stream commits into on object storage (the run and the
    store on s3, the outputs local): detections while the stream runs, then the outputs of an
    offline predict."""
    run_url = (
        f"s3://{bucket}/runs/a"  # the session's trained run, as a run folder on object storage
    )
    upload_tree(runs.run, Remote(run_url))
    follow_beside_a_stream(tmp_path, run_url, f"s3://{bucket}/live.zarr", streams)


def test_follow_into_s3_outputs_is_refused_in_one_line(
    tmp_path: Path, bucket: str, runs: Trained
) -> None:
    result = run_cli(
        "predict",
        runs.run,
        runs.store,
        "--follow",
        "--out",
        f"s3://{bucket}/scores.zarr",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert error_line(result) == (
        f"chunkfit: error: s3://{bucket}/scores.zarr: predict --follow writes local outputs only "
        "(it grows them in place); write them to a local path, or drop --follow to score the store "
        "as it is now"
    )
