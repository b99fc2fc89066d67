"""Each segment's start time recorded at ingest from text sources (``segment_times``), kept across
appends, and refused when malformed; recording formats are tested with their files in formats/."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest
from support import run_cli, write_csv

import chunkfit
from chunkfit import IngestOptions
from chunkfit.errors import StoreFormatError

START = dt.datetime(2024, 3, 1, 23, 59, 58)
SECONDS = [i * 0.25 for i in range(10)] + [60 + i * 0.25 for i in range(6)]


def iso_csv(path: Path, start: dt.datetime = START, zone: str = "") -> Path:
    times = [
        (start + dt.timedelta(seconds=s)).isoformat(timespec="milliseconds") + zone for s in SECONDS
    ]
    return write_csv(path, np.arange(16.0)[:, None], names=["x"], times=times)


def test_an_iso_time_column_stores_each_segments_utc_start(
    store_path: Path, tmp_path: Path
) -> None:
    chunkfit.ingest(store_path, [str(iso_csv(tmp_path / "a.csv"))], IngestOptions(time_column="t"))
    with chunkfit.open_store(store_path) as s:
        assert s.attrs["segment_times"] == [
            {"sample": 0, "utc": "2024-03-01T23:59:58.000000Z"},
            {"sample": 10, "utc": "2024-03-02T00:00:58.000000Z"},
        ]


def test_an_iso_time_with_an_offset_is_stored_in_utc(store_path: Path, tmp_path: Path) -> None:
    src = iso_csv(tmp_path / "a.csv", zone="+02:00")
    chunkfit.ingest(store_path, [str(src)], IngestOptions(time_column="t"))
    with chunkfit.open_store(store_path) as s:
        assert s.attrs["segment_times"][0] == {"sample": 0, "utc": "2024-03-01T21:59:58.000000Z"}


def test_a_numeric_time_column_stores_times_on_the_sources_own_clock(
    store_path: Path, tmp_path: Path
) -> None:
    src = write_csv(tmp_path / "a.csv", np.arange(16.0)[:, None], names=["x"], times=SECONDS)
    chunkfit.ingest(store_path, [str(src)], IngestOptions(time_column="t"))
    with chunkfit.open_store(store_path) as s:
        assert s.attrs["segment_times"] == [
            {"sample": 0, "seconds": 0.0, "source": 0},
            {"sample": 10, "seconds": 60.0, "source": 0},
        ]


def test_a_source_without_times_records_none(store_path: Path, tmp_path: Path) -> None:
    src = write_csv(tmp_path / "a.csv", np.arange(16.0)[:, None], names=["x"])
    chunkfit.ingest(store_path, [str(src)], IngestOptions(rate=4.0))
    with chunkfit.open_store(store_path) as s:
        assert ("segment_times" in s.attrs, s.segment_times) == (False, [None])


def test_an_append_adds_its_segments_times_to_the_stores(store_path: Path, tmp_path: Path) -> None:
    numeric = write_csv(tmp_path / "n.csv", np.arange(16.0)[:, None], names=["x"], times=SECONDS)
    chunkfit.ingest(store_path, [str(numeric)], IngestOptions(time_column="t"))
    later = iso_csv(tmp_path / "b.csv", START + dt.timedelta(days=1))
    chunkfit.ingest(store_path, [str(later)], IngestOptions(time_column="t"), append=True)
    with chunkfit.open_store(store_path) as s:
        assert s.attrs["segment_times"] == [
            {"sample": 0, "seconds": 0.0, "source": 0},
            {"sample": 10, "seconds": 60.0, "source": 0},
            {"sample": 16, "utc": "2024-03-02T23:59:58.000000Z"},
            {"sample": 26, "utc": "2024-03-03T00:00:58.000000Z"},
        ]


def test_a_live_stream_commits_its_segments_utc_start(tmp_path: Path) -> None:
    src = iso_csv(tmp_path / "a.csv").read_bytes()
    result = run_cli("ingest", "live.zarr", "-", "--time-column", "t", cwd=tmp_path, input=src)
    assert result.returncode == 0, result.stderr
    with chunkfit.open_store(tmp_path / "live.zarr") as s:
        assert [t["utc"] for t in s.attrs["segment_times"]] == [
            "2024-03-01T23:59:58.000000Z",
            "2024-03-02T00:00:58.000000Z",
        ]


def test_a_malformed_segment_times_attribute_is_refused(tmp_path: Path) -> None:
    src = iso_csv(tmp_path / "a.csv")
    chunkfit.ingest(tmp_path / "s.zarr", [str(src)], IngestOptions(time_column="t"))
    meta = tmp_path / "s.zarr" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["chunkfit"]["segment_times"] = [{"sample": 0, "utc": "yesterday"}]
    meta.write_text(json.dumps(doc))
    with pytest.raises(StoreFormatError, match="segment_times entries are"):
        chunkfit.open_store(tmp_path / "s.zarr")


def test_info_says_when_a_one_segment_store_was_recorded(tmp_path: Path) -> None:
    src = write_csv(
        tmp_path / "a.csv",
        np.arange(4.0)[:, None],
        names=["x"],
        times=[f"2024-03-01T12:00:0{i}Z" for i in range(4)],
    )
    assert run_cli("ingest", "s.zarr", src, "--time-column", "t", cwd=tmp_path).returncode == 0
    out = run_cli("info", "s.zarr", cwd=tmp_path).stdout
    assert "[0, 4) from 2024-03-01T12:00:00.000000Z" in out
