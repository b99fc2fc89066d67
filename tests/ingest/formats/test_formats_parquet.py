"""Parquet sources: files written by pyarrow, read back through ingest and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import error_line, run_cli, siblings

import chunkfit
from chunkfit import IngestOptions
from chunkfit.errors import SourceFormatError, UsageError
from chunkfit.ingest import ingest


def write_parquet(path: Path, columns: dict[str, object], row_group_size: int = 64) -> Path:
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


@pytest.fixture
def sensor(tmp_path: Path) -> Path:
    """300 rows at 50 Hz in five row groups: time, two channels (float64, int64), text, label."""
    n = 300
    return write_parquet(
        tmp_path / "sensor.parquet",
        {
            "t": np.arange(n) / 50.0,
            "acc": np.sin(np.arange(n) / 9.0),
            "count": np.arange(n, dtype=np.int64) * 1_000,
            "note": [f"n{i}" for i in range(n)],
            "cls": (np.arange(n) // 100).astype(np.int16),
        },
    )


def read_store(path: Path) -> dict[str, object]:
    with chunkfit.open_store(path) as s:
        return {
            "channels": s.channels,
            "rate": s.sample_rate,
            "signal": s.read(0, s.n_samples),
            "segments": s.segments.tolist(),
            "labels": s.read_labels(0, s.n_samples) if s.has_labels else None,
        }


def test_numeric_columns_become_channels_with_rate_and_labels(
    sensor: Path, store_path: Path
) -> None:
    ingest(store_path, [str(sensor)], IngestOptions(time_column="t", label_column="cls"))
    got = read_store(store_path)
    table = pq.read_table(sensor)
    assert (got["channels"], got["rate"], got["segments"]) == (["acc", "count"], 50.0, [[0, 300]])
    expected = np.stack([table["acc"].to_numpy(), table["count"].to_numpy()], axis=1).astype(
        np.float32
    )
    np.testing.assert_array_equal(got["signal"], expected)
    np.testing.assert_array_equal(got["labels"], np.arange(300) // 100)


def test_a_time_gap_splits_segments_as_in_csv(tmp_path: Path, store_path: Path) -> None:
    t = np.concatenate([np.arange(100), 200 + np.arange(100)]) / 10.0
    src = write_parquet(tmp_path / "gap.parquet", {"t": t, "x": np.arange(200.0)})
    report = ingest(store_path, [str(src)], IngestOptions(time_column="t"))
    got = read_store(store_path)
    assert (report.segments, got["segments"], got["rate"]) == (2, [[0, 100], [100, 200]], 10.0)


def test_a_timestamp_time_column_gives_the_rate(tmp_path: Path, store_path: Path) -> None:
    stamps = pa.array(
        np.datetime64("2024-03-01T12:00:00", "ms") + np.arange(120) * np.timedelta64(4, "ms")
    )
    src = write_parquet(tmp_path / "ts.parquet", {"when": stamps, "x": np.arange(120.0)})
    ingest(store_path, [str(src)], IngestOptions(time_column="when"))
    got = read_store(store_path)
    assert (got["rate"], got["segments"], got["channels"]) == (250.0, [[0, 120]], ["x"])


def test_columns_and_names_pick_and_rename_channels(sensor: Path, store_path: Path) -> None:
    ingest(
        store_path, [str(sensor)], IngestOptions(columns=("count",), names=("ticks",), rate=50.0)
    )
    got = read_store(store_path)
    assert (got["channels"], got["rate"]) == (["ticks"], 50.0)
    np.testing.assert_array_equal(got["signal"][:, 0], np.arange(300) * 1_000)


def test_a_text_column_named_in_columns_is_refused_naming_its_type(
    sensor: Path, store_path: Path
) -> None:
    with pytest.raises(
        UsageError,
        match=re.escape(
            f"{sensor}: --columns 'note' has type string; channels must be numeric columns"
        ),
    ):
        ingest(store_path, [str(sensor)], IngestOptions(columns=("acc", "note")))


def test_a_null_is_refused_naming_row_and_column(tmp_path: Path, store_path: Path) -> None:
    x = pa.array([float(i) if i != 77 else None for i in range(100)])
    src = write_parquet(tmp_path / "nulls.parquet", {"x": x}, row_group_size=30)
    with pytest.raises(
        SourceFormatError,
        match=re.escape(
            f"{src}: row 77 (counted from 0), column 'x': empty value in channel 'x'; fix the "
            "source or pass --nan keep / --nan interpolate"
        ),
    ):
        ingest(store_path, [str(src)], IngestOptions())
    assert siblings(store_path) == ["nulls.parquet"]


def test_nulls_are_interpolated_with_nan_interpolate(tmp_path: Path, store_path: Path) -> None:
    x = pa.array([float(i) if i not in (40, 41) else None for i in range(100)])
    src = write_parquet(tmp_path / "nulls.parquet", {"x": x}, row_group_size=30)
    ingest(store_path, [str(src)], IngestOptions(nan="interpolate"))
    np.testing.assert_array_equal(read_store(store_path)["signal"][:, 0], np.arange(100.0))


def test_a_value_beyond_float32_is_refused(tmp_path: Path, store_path: Path) -> None:
    src = write_parquet(tmp_path / "big.parquet", {"x": np.array([1.0, 2.0, 1e40])})
    with pytest.raises(
        SourceFormatError,
        match=re.escape(
            f"{src}: row 2 (counted from 0), column 'x': 1e+40 is beyond float32 storage"
        ),
    ):
        ingest(store_path, [str(src)], IngestOptions())


def test_a_file_cut_in_half_is_refused_by_the_cli_with_one_line(sensor: Path) -> None:
    sensor.write_bytes(sensor.read_bytes()[: sensor.stat().st_size // 2])
    result = run_cli("ingest", "out.zarr", sensor.name, cwd=sensor.parent)
    assert error_line(result).startswith(
        "chunkfit: error: sensor.parquet: not a readable Parquet file ("
    )
    assert siblings(sensor.parent / "out.zarr") == ["sensor.parquet"]


def test_damaged_data_pages_are_refused_by_the_cli_naming_the_row_group(tmp_path: Path) -> None:
    src = tmp_path / "pages.parquet"
    pq.write_table(
        pa.table({"x": np.arange(4_000.0)}), src, row_group_size=1_000, compression="snappy"
    )
    raw = bytearray(src.read_bytes())
    raw[4 : 4 + 2_000] = b"\xa5" * 2_000  # the first row group's pages; the footer stays readable
    src.write_bytes(bytes(raw))
    result = run_cli("ingest", "out.zarr", src.name, cwd=tmp_path)
    assert error_line(result).startswith(
        "chunkfit: error: pages.parquet: damaged Parquet data in row group 0 (from row 0): "
    )
    assert siblings(tmp_path / "out.zarr") == ["pages.parquet"]


def test_a_file_without_its_suffix_is_recognised_by_its_magic(sensor: Path) -> None:
    plain = sensor.rename(sensor.parent / "export")
    result = run_cli("ingest", "out.h5", plain.name, "--time-column", "t", cwd=plain.parent)
    assert result.returncode == 0, result.stderr
    got = read_store(plain.parent / "out.h5")
    assert (got["channels"], got["rate"]) == (["acc", "count", "cls"], 50.0)


def test_a_timestamp_time_column_stores_each_segments_utc_start(
    tmp_path: Path, store_path: Path
) -> None:
    t0 = np.datetime64("2024-05-01T12:00:00", "ms")
    steps = np.r_[np.arange(100) * 20, 10_000 + np.arange(100) * 20].astype("timedelta64[ms]")
    path = write_parquet(tmp_path / "t.parquet", {"t": t0 + steps, "x": np.arange(200.0)})
    ingest(store_path, [str(path)], IngestOptions(time_column="t"))
    with chunkfit.open_store(store_path) as s:
        assert s.attrs["segment_times"] == [
            {"sample": 0, "utc": "2024-05-01T12:00:00.000000Z"},
            {"sample": 100, "utc": "2024-05-01T12:00:10.000000Z"},
        ]


def test_a_numeric_time_column_stores_times_on_the_files_own_clock(
    tmp_path: Path, store_path: Path
) -> None:
    t = np.r_[np.arange(100) * 0.02, 10 + np.arange(100) * 0.02]
    path = write_parquet(tmp_path / "t.parquet", {"t": t, "x": np.arange(200.0)})
    ingest(store_path, [str(path)], IngestOptions(time_column="t"))
    with chunkfit.open_store(store_path) as s:
        assert s.attrs["segment_times"] == [
            {"sample": 0, "seconds": 0.0, "source": 0},
            {"sample": 100, "seconds": 10.0, "source": 0},
        ]
