"""Ingest through the library: round trips from every source kind, segments, rates, append, and
the NaN policies."""

from __future__ import annotations

import datetime as dt
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from support import SUFFIX, cli_env, contents, examples, snapshot, write_csv

import chunkfit
from chunkfit import IngestOptions
from chunkfit.errors import IncompatibleError, SourceFormatError

FINITE = st.floats(min_value=-1e30, max_value=1e30, allow_nan=False, allow_infinity=False)


def values_strategy(max_rows: int = 40, max_channels: int = 4) -> st.SearchStrategy[np.ndarray]:
    shapes = st.tuples(st.integers(1, max_rows), st.integers(1, max_channels))
    return shapes.flatmap(lambda shape: hnp.arrays(np.float64, shape, elements=FINITE))


def read_back(path: Path) -> np.ndarray:
    with chunkfit.open_store(path) as s:
        return s.read(0, s.n_samples)


# -- round trips -------------------------------------------------------------------------------


@examples(25)
@given(values=values_strategy(), header=st.booleans(), delimiter=st.sampled_from([",", "\t"]))
def test_csv_round_trip_reads_back_the_float32_of_the_parsed_values(
    backend: str, values: np.ndarray, header: bool, delimiter: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        names = [f"v{j}" for j in range(values.shape[1])] if header else None
        src = write_csv(Path(tmp) / "in.csv", values, names=names, delimiter=delimiter)
        store = Path(tmp) / f"out{SUFFIX[backend]}"
        chunkfit.ingest(store, [str(src)], IngestOptions(rate=50.0))
        np.testing.assert_array_equal(read_back(store), values.astype(np.float32))
        with chunkfit.open_store(store) as s:
            assert s.channels == (names or [f"ch{j}" for j in range(values.shape[1])])
            assert s.segments.tolist() == [[0, values.shape[0]]]


@examples(20)
@given(
    array=st.sampled_from([np.float32, np.float64, np.int16, np.uint8]).flatmap(
        lambda dtype: hnp.arrays(
            dtype,
            st.one_of(
                st.tuples(st.integers(1, 60)), st.tuples(st.integers(1, 60), st.integers(1, 3))
            ),
            # float64 values stay within float32's range: larger ones are refused (tested below)
            elements=hnp.from_dtype(
                np.dtype(dtype),
                allow_nan=False,
                allow_infinity=False,
                min_value=-(2.0**126),
                max_value=2.0**126,
            )
            if np.dtype(dtype).kind == "f"
            else None,
        )
    )
)
def test_npy_round_trip_reads_back_the_array_as_float32(backend: str, array: np.ndarray) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.npy"
        np.save(src, array)
        store = Path(tmp) / f"out{SUFFIX[backend]}"
        chunkfit.ingest(store, [str(src)], IngestOptions(rate=1.0, block_bytes=64))
        np.testing.assert_array_equal(
            read_back(store), array.reshape(array.shape[0], -1).astype(np.float32)
        )


@examples(20)
@given(values=values_strategy(max_rows=80))
def test_hdf5_dataset_round_trip_reads_back_the_float32_of_the_dataset(
    backend: str, values: np.ndarray
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.h5"
        with h5py.File(src, "w") as f:
            f.create_dataset("/group/data", data=values)
        store = Path(tmp) / f"out{SUFFIX[backend]}"
        names = tuple(f"s{j}" for j in range(values.shape[1]))
        chunkfit.ingest(
            store, [f"{src}:/group/data"], IngestOptions(rate=2.0, names=names, block_bytes=100)
        )
        np.testing.assert_array_equal(read_back(store), values.astype(np.float32))
        with chunkfit.open_store(store) as s:
            assert s.channels == list(names)


@examples(20)
@given(
    data=st.data(),
    n=st.integers(1, 300),
)
def test_events_round_trip_as_sorted_distinct_sample_indices(
    backend: str, data: st.DataObject, n: int
) -> None:
    marks = data.draw(st.lists(st.integers(0, n - 1), max_size=30), label="marks")
    with tempfile.TemporaryDirectory() as tmp:
        src = write_csv(Path(tmp) / "in.csv", np.arange(n, dtype=np.float64)[:, None], names=["x"])
        events = Path(tmp) / "events.txt"
        events.write_text("".join(f"{m}\n" for m in marks))
        store = Path(tmp) / f"out{SUFFIX[backend]}"
        report = chunkfit.ingest(store, [str(src)], IngestOptions(rate=10.0, events=str(events)))
        with chunkfit.open_store(store) as s:
            np.testing.assert_array_equal(s.events, np.unique(np.asarray(marks, dtype=np.int64)))
            assert s.has_events
        assert report.events == len(set(marks))


@examples(20)
@given(labels=st.lists(st.integers(-3, 5), min_size=1, max_size=200))
def test_labels_round_trip_with_their_class_counts(backend: str, labels: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        values = np.arange(len(labels), dtype=np.float64)[:, None]
        src = write_csv(Path(tmp) / "in.csv", values, names=["x"], labels=labels)
        store = Path(tmp) / f"out{SUFFIX[backend]}"
        chunkfit.ingest(store, [str(src)], IngestOptions(rate=10.0, label_column="label"))
        with chunkfit.open_store(store) as s:
            np.testing.assert_array_equal(s.read_labels(0, s.n_samples), labels)
            np.testing.assert_array_equal(s.read(0, s.n_samples)[:, 0], values[:, 0])
            counts = {str(k): labels.count(k) for k in sorted(set(labels))}
            assert s.attrs["label_counts"] == counts


# -- time column: rate and segments ---------------------------------------------------------------


@examples(25)
@given(
    n=st.integers(2, 200),
    data=st.data(),
)
def test_segments_split_exactly_at_timestamp_gaps(
    backend: str, n: int, data: st.DataObject
) -> None:
    gaps = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=5), label="gaps"))
    assume(2 * len(gaps) < n - 1)  # the rate is the typical step: most steps must be regular
    times = np.arange(n) / 8.0
    for g in gaps:
        times[g:] += 3.0  # far over 1.5 sample periods: a gap
    bounds = [0, *gaps, n]
    with tempfile.TemporaryDirectory() as tmp:
        src = write_csv(Path(tmp) / "in.csv", np.zeros((n, 1)), names=["x"], times=times)
        store = Path(tmp) / f"out{SUFFIX[backend]}"
        report = chunkfit.ingest(store, [str(src)], IngestOptions(time_column="t"))
        with chunkfit.open_store(store) as s:
            assert s.segments.tolist() == [[a, b] for a, b in itertools.pairwise(bounds)]
            assert s.sample_rate == 8.0
        assert report.segments == len(bounds) - 1


def test_gaps_in_later_blocks_split_segments_at_the_right_samples(
    store_path: Path, tmp_path: Path
) -> None:
    times = np.arange(400) / 8.0
    times[150:] += 10.0
    times[333:] += 1.0
    src = write_csv(tmp_path / "in.csv", np.zeros((400, 1)), names=["x"], times=times)
    chunkfit.ingest(store_path, [str(src)], IngestOptions(time_column="t", block_bytes=500))
    with chunkfit.open_store(store_path) as s:
        assert s.segments.tolist() == [[0, 150], [150, 333], [333, 400]]


def test_rate_is_derived_from_the_time_column(store_path: Path, small_csv: Path) -> None:
    chunkfit.ingest(store_path, [str(small_csv)], IngestOptions(time_column="t"))
    with chunkfit.open_store(store_path) as s:
        assert s.sample_rate == 100.0
        assert s.channels == ["a", "b"]


def test_each_source_file_starts_a_new_segment(store_path: Path, tmp_path: Path) -> None:
    sizes = [5, 7, 3]
    files = [
        str(write_csv(tmp_path / f"part{i}.csv", np.full((n, 1), float(i)), names=["x"]))
        for i, n in enumerate(sizes)
    ]
    report = chunkfit.ingest(store_path, files, IngestOptions(rate=1.0))
    with chunkfit.open_store(store_path) as s:
        assert s.segments.tolist() == [[0, 5], [5, 12], [12, 15]]
        np.testing.assert_array_equal(s.read(0, 15)[:, 0], [0] * 5 + [1] * 7 + [2] * 3)
        assert [src["rows"] for src in s.attrs["sources"]] == sizes
    assert report.segments == 3


def test_sources_record_name_size_rows_and_sha256(store_path: Path, small_csv: Path) -> None:
    import hashlib

    chunkfit.ingest(store_path, [str(small_csv)], IngestOptions(time_column="t"))
    with chunkfit.open_store(store_path) as s:
        assert s.attrs["sources"] == [
            {
                "name": str(small_csv),
                "size": small_csv.stat().st_size,
                "rows": 300,
                "sha256": hashlib.sha256(small_csv.read_bytes()).hexdigest(),
            }
        ]


def _iso(start: dt.datetime, seconds: float) -> str:
    return (start + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def test_iso8601_time_column_gives_rate_and_gap_segments(store_path: Path, tmp_path: Path) -> None:
    start = dt.datetime(2024, 3, 1, 23, 59, 58)
    seconds = [i * 0.25 for i in range(10)] + [60 + i * 0.25 for i in range(6)]
    src = write_csv(
        tmp_path / "iso.csv",
        np.arange(16.0)[:, None],
        names=["x"],
        times=[_iso(start, s) for s in seconds],
    )
    chunkfit.ingest(store_path, [str(src)], IngestOptions(time_column="t"))
    with chunkfit.open_store(store_path) as s:
        assert s.sample_rate == 4.0
        assert s.segments.tolist() == [[0, 10], [10, 16]]


def test_iso8601_event_times_are_placed_on_their_samples(store_path: Path, tmp_path: Path) -> None:
    start = dt.datetime(2024, 3, 1, 12, 0, 0)
    seconds = [i * 0.25 for i in range(10)] + [60 + i * 0.25 for i in range(6)]
    src = write_csv(
        tmp_path / "iso.csv",
        np.arange(16.0)[:, None],
        names=["x"],
        times=[_iso(start, s) for s in seconds],
    )
    events = tmp_path / "events.txt"
    events.write_text(f"time\n{_iso(start, 0.5)}\n{_iso(start, 60.75)}\n")
    chunkfit.ingest(store_path, [str(src)], IngestOptions(time_column="t", events=str(events)))
    with chunkfit.open_store(store_path) as s:
        assert s.events.tolist() == [2, 13]


def test_event_times_in_seconds_are_placed_through_the_time_column(
    store_path: Path, small_csv: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.txt"
    events.write_text("0.5\n2.99\n")
    chunkfit.ingest(
        store_path, [str(small_csv)], IngestOptions(time_column="t", events=str(events))
    )
    with chunkfit.open_store(store_path) as s:
        assert s.events.tolist() == [50, 299]


def test_sources_at_different_rates_are_refused(store_path: Path, tmp_path: Path) -> None:
    a = write_csv(tmp_path / "a.csv", np.zeros((4, 1)), names=["x"], times=[0, 1, 2, 3])
    b = write_csv(tmp_path / "b.csv", np.zeros((4, 1)), names=["x"], times=[10, 10.1, 10.2, 10.3])
    with pytest.raises(IncompatibleError, match="runs at 10 Hz, the earlier sources at 1 Hz"):
        chunkfit.ingest(store_path, [str(a), str(b)], IngestOptions(time_column="t"))
    assert not store_path.exists()


def test_a_header_only_source_among_others_is_refused_as_empty(
    store_path: Path, tmp_path: Path, small_csv: Path
) -> None:
    header_only = tmp_path / "header.csv"
    header_only.write_text("t,a,b\n")
    with pytest.raises(SourceFormatError, match=r"header\.csv: empty source: no data rows"):
        chunkfit.ingest(
            store_path, [str(small_csv), str(header_only)], IngestOptions(time_column="t")
        )
    assert not store_path.exists()


def test_failed_ingest_into_a_new_folder_leaves_no_folder(tmp_path: Path, backend: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("x\n1\nnan\n")
    with pytest.raises(SourceFormatError):
        chunkfit.ingest(
            tmp_path / "new" / "deeper" / f"s{SUFFIX[backend]}", [str(bad)], IngestOptions(rate=1.0)
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


# -- NaN policies --------------------------------------------------------------------------------


def test_nan_keep_stores_nan_and_leaves_it_out_of_the_stats(
    store_path: Path, tmp_path: Path
) -> None:
    src = tmp_path / "gappy.csv"
    src.write_text("a,b\n1,2\nnan,4\n3,\n")
    chunkfit.ingest(store_path, [str(src)], IngestOptions(rate=1.0, nan="keep"))
    with chunkfit.open_store(store_path) as s:
        np.testing.assert_array_equal(s.read(0, 3), [[1, 2], [np.nan, 4], [3, np.nan]])
        assert (s.attrs["stats"]["a"]["count"], s.attrs["stats"]["a"]["mean"]) == (2, 2.0)
        assert (s.attrs["stats"]["b"]["count"], s.attrs["stats"]["b"]["mean"]) == (2, 3.0)


def test_arrow_columns_are_copied_with_nulls_as_nan_and_slices_honoured() -> None:
    """Values come straight from arrow buffers: slice offsets and the null bitmap must count."""
    import pyarrow as pa

    from chunkfit.ingest.csvparse import column_array as _column

    base = pa.array([0.5, None, 2.5, 3.5, None, 5.5, 6.5, 7.5, 8.5, None, 10.5])
    col = pa.chunked_array([base.slice(1, 4), base.slice(7), pa.array([], pa.float64())])
    np.testing.assert_array_equal(
        _column(col, np.float64), [np.nan, 2.5, 3.5, np.nan, 7.5, 8.5, np.nan, 10.5]
    )
    ints = pa.chunked_array([pa.array(list(range(20)), pa.int64()).slice(13, 3)])
    np.testing.assert_array_equal(_column(ints, np.int64), [13, 14, 15])


def test_nan_interpolate_fills_linearly_and_holds_the_ends(
    store_path: Path, tmp_path: Path
) -> None:
    src = tmp_path / "gappy.csv"
    src.write_text("a,b\nnan,0\n1,10\nnan,\ninf,20\n4,nan\n5,40\nNA,\n")
    chunkfit.ingest(store_path, [str(src)], IngestOptions(rate=1.0, nan="interpolate"))
    np.testing.assert_array_equal(
        read_back(store_path), [[1, 0], [1, 10], [2, 15], [3, 20], [4, 30], [5, 40], [5, 40]]
    )


def _interpolated(values: np.ndarray) -> np.ndarray:
    """Brute force: per column, np.interp over the whole column (constant beyond the ends)."""
    out = values.copy()
    idx = np.arange(values.shape[0])
    for j in range(values.shape[1]):
        ok = np.isfinite(values[:, j])
        out[:, j] = np.interp(idx, idx[ok], values[ok, j])
    return out


@examples(25)
@given(
    values=hnp.arrays(
        np.float64, st.tuples(st.integers(2, 120), st.integers(1, 3)), elements=st.floats(-100, 100)
    ),
    data=st.data(),
)
def test_nan_interpolate_across_block_boundaries_equals_whole_column_interpolation(
    backend: str, values: np.ndarray, data: st.DataObject
) -> None:
    mask = data.draw(hnp.arrays(np.bool_, values.shape), label="nan mask")
    mask[data.draw(st.integers(0, values.shape[0] - 1), label="finite row")] = False
    holed = np.where(mask, np.nan, values)
    with tempfile.TemporaryDirectory() as tmp:
        src = write_csv(
            Path(tmp) / "in.csv", holed, names=[f"c{j}" for j in range(values.shape[1])]
        )
        store = Path(tmp) / f"out{SUFFIX[backend]}"
        chunkfit.ingest(
            store, [str(src)], IngestOptions(rate=1.0, nan="interpolate", block_bytes=64)
        )
        np.testing.assert_allclose(
            read_back(store), _interpolated(holed).astype(np.float32), rtol=1e-6, atol=1e-5
        )


@examples(15)
@given(first_nan=st.integers(1, 46), length=st.integers(1, 3))
def test_nan_interpolate_keeps_segments_at_their_gaps(
    backend: str, first_nan: int, length: int
) -> None:
    """Rows held back while waiting for a finite value must not shift the segment boundaries."""
    times = np.r_[np.arange(0, 50), np.arange(100, 150)].astype(np.float64)
    values = np.arange(100, dtype=np.float64)
    values[first_nan : first_nan + length] = np.nan
    with tempfile.TemporaryDirectory() as tmp:
        src = write_csv(Path(tmp) / "in.csv", values[:, None], names=["v"], times=times)
        store = Path(tmp) / f"out{SUFFIX[backend]}"
        chunkfit.ingest(
            store, [str(src)], IngestOptions(time_column="t", nan="interpolate", block_bytes=100)
        )
        with chunkfit.open_store(store) as s:
            assert s.segments.tolist() == [[0, 50], [50, 100]]
            np.testing.assert_array_equal(s.read(0, 100)[:, 0], np.arange(100, dtype=np.float32))


def test_nan_interpolate_with_a_label_column_keeps_labels_aligned(
    store_path: Path, tmp_path: Path
) -> None:
    src = tmp_path / "labelled.csv"
    src.write_text("t,a,label\n0,1,0\n1,nan,1\n2,3,2\n3,nan,3\n")
    chunkfit.ingest(
        store_path,
        [str(src)],
        IngestOptions(time_column="t", label_column="label", nan="interpolate"),
    )
    with chunkfit.open_store(store_path) as s:
        np.testing.assert_array_equal(s.read(0, 4)[:, 0], [1, 2, 3, 3])
        np.testing.assert_array_equal(s.read_labels(0, 4), [0, 1, 2, 3])


def test_a_value_too_large_for_float32_is_refused(store_path: Path, tmp_path: Path) -> None:
    src = tmp_path / "huge.csv"
    src.write_text("a\n1\n1e39\n")
    with pytest.raises(
        SourceFormatError, match=r"huge\.csv:3:1: '1e39' in channel 'a' is beyond float32 storage"
    ):
        chunkfit.ingest(store_path, [str(src)], IngestOptions(rate=1.0))


# -- append ---------------------------------------------------------------------------------------


@pytest.fixture
def first(store_path: Path, tmp_path: Path) -> Path:
    """A store from one 200-row recording at 100 Hz, channels a and b, with two events."""
    rng = np.random.default_rng(1)
    src = write_csv(
        tmp_path / "first.csv",
        rng.normal(size=(200, 2)),
        names=["a", "b"],
        times=np.arange(200) / 100,
    )
    events = tmp_path / "first_events.txt"
    events.write_text("10\n150\n")
    chunkfit.ingest(store_path, [str(src)], IngestOptions(time_column="t", events=str(events)))
    return store_path


def test_append_adds_the_new_recording_as_new_segments(first: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    new = rng.normal(3, 2, size=(120, 2))
    times = np.r_[np.arange(70), np.arange(200, 250)] / 100  # a gap after 70 rows
    src = write_csv(tmp_path / "second.csv", new, names=["a", "b"], times=times)
    events = tmp_path / "second_events.txt"
    events.write_text("0\n119\n")
    old = contents(first)
    report = chunkfit.ingest(
        first, [str(src)], IngestOptions(time_column="t", events=str(events)), append=True
    )
    after = contents(first)
    np.testing.assert_array_equal(
        after["signal"], np.concatenate([old["signal"], new.astype(np.float32)])
    )
    assert after["segments"].tolist() == [[0, 200], [200, 270], [270, 320]]
    assert after["events"].tolist() == [10, 150, 200, 319]
    assert [s["name"] for s in after["attrs"]["sources"]] == [
        old["attrs"]["sources"][0]["name"],
        str(src),
    ]
    assert (report.samples, report.segments, report.events) == (120, 2, 2)


def test_append_merges_the_stats_with_the_stored_ones(first: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    src = write_csv(
        tmp_path / "second.csv",
        rng.normal(-4, 9, size=(333, 2)),
        names=["a", "b"],
        times=np.arange(333) / 100,
    )
    chunkfit.ingest(first, [str(src)], IngestOptions(time_column="t"), append=True)
    with chunkfit.open_store(first) as s:
        whole = s.read(0, s.n_samples).astype(np.float64)
        stats = s.attrs["stats"]
    for j, name in enumerate(["a", "b"]):
        assert stats[name]["count"] == 533
        np.testing.assert_allclose(
            [stats[name]["mean"], stats[name]["std"], stats[name]["min"], stats[name]["max"]],
            [whole[:, j].mean(), whole[:, j].std(), whole[:, j].min(), whole[:, j].max()],
            rtol=1e-9,
        )


def test_append_of_labelled_recordings_adds_labels_and_counts(
    store_path: Path, tmp_path: Path
) -> None:
    a = write_csv(tmp_path / "a.csv", np.zeros((4, 1)), names=["x"], labels=[0, 1, 1, 2])
    b = write_csv(tmp_path / "b.csv", np.ones((3, 1)), names=["x"], labels=[2, 2, 5])
    opts = IngestOptions(rate=5.0, label_column="label")
    chunkfit.ingest(store_path, [str(a)], opts)
    chunkfit.ingest(store_path, [str(b)], opts, append=True)
    with chunkfit.open_store(store_path) as s:
        np.testing.assert_array_equal(s.read_labels(0, 7), [0, 1, 1, 2, 2, 2, 5])
        assert s.attrs["label_counts"] == {"0": 1, "1": 2, "2": 3, "5": 1}


def _refused_append(first: Path, src: Path, options: IngestOptions, match: str) -> None:
    before_files = snapshot(first)
    before = contents(first)
    with pytest.raises(IncompatibleError, match=match):
        chunkfit.ingest(first, [str(src)], options, append=True)
    assert snapshot(first) == before_files
    after = contents(first)
    np.testing.assert_array_equal(after["signal"], before["signal"])
    assert after["attrs"] == before["attrs"]


def test_append_with_other_channel_names_is_refused(first: Path, tmp_path: Path) -> None:
    src = write_csv(
        tmp_path / "x.csv", np.zeros((5, 2)), names=["a", "c"], times=np.arange(5) / 100
    )
    _refused_append(
        first,
        src,
        IngestOptions(time_column="t"),
        r"channels \['a', 'c'\] differ from the store's \['a', 'b'\]",
    )


def test_append_with_other_channel_count_is_refused(first: Path, tmp_path: Path) -> None:
    src = write_csv(
        tmp_path / "x.csv", np.zeros((5, 3)), names=["a", "b", "c"], times=np.arange(5) / 100
    )
    _refused_append(
        first, src, IngestOptions(time_column="t"), r"channels \['a', 'b', 'c'\] differ"
    )


def test_append_with_labels_to_a_store_without_labels_is_refused(
    first: Path, tmp_path: Path
) -> None:
    src = write_csv(
        tmp_path / "x.csv",
        np.zeros((5, 2)),
        names=["a", "b"],
        times=np.arange(5) / 100,
        labels=[0] * 5,
    )
    _refused_append(
        first,
        src,
        IngestOptions(time_column="t", label_column="label"),
        "has no labels: drop --label-column",
    )


def test_append_without_labels_to_a_labelled_store_is_refused(
    store_path: Path, tmp_path: Path
) -> None:
    a = write_csv(tmp_path / "a.csv", np.zeros((4, 1)), names=["x"], labels=[0, 1, 1, 2])
    chunkfit.ingest(store_path, [str(a)], IngestOptions(rate=5.0, label_column="label"))
    b = write_csv(tmp_path / "b.csv", np.zeros((4, 1)), names=["x"])
    _refused_append(store_path, b, IngestOptions(rate=5.0), "the store needs --label-column")


def test_append_at_another_rate_is_refused(first: Path, tmp_path: Path) -> None:
    src = write_csv(
        tmp_path / "x.csv", np.zeros((5, 2)), names=["a", "b"], times=np.arange(5) / 250
    )
    _refused_append(
        first, src, IngestOptions(time_column="t"), r"runs at 250 Hz, the store .* at 100 Hz"
    )


def test_append_with_another_rate_flag_is_refused(first: Path, tmp_path: Path) -> None:
    src = write_csv(tmp_path / "x.csv", np.zeros((5, 2)), names=["a", "b"])
    _refused_append(
        first, src, IngestOptions(rate=50.0), r"--rate: runs at 50 Hz, the store .* at 100 Hz"
    )


@pytest.mark.parametrize("name", ["ingest", "synth", "bench"])
def test_function_stays_callable_after_its_module_is_imported(name: str) -> None:
    # chunkfit.ingest is both a function and a subpackage: importing a submodule first must not
    # leave the module where the function was.
    code = (
        f"import chunkfit.{name}, chunkfit.ingest.sources, chunkfit; "
        f"assert callable(chunkfit.{name}), chunkfit.{name}"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_threaded_block_parse_keeps_no_hold_on_the_block_once_it_returns() -> None:
    """pyarrow's threaded CSV parse, handed the block's bytes themselves, can still hold them in one
    of its threads after returning (more often under load); that thread takes the GIL to let go of
    them, and at interpreter exit that aborts the process. ``read_csv_block`` hands it Arrow's own
    memory."""
    import pyarrow.csv as pacsv

    from chunkfit.ingest.csvparse import read_csv_block

    rows = np.round(np.random.default_rng(0).normal(size=(20_000, 2)), 5)
    body = "".join(f"{a:.5f},{b:.5f}\n" for a, b in rows).encode()
    threaded = pacsv.ReadOptions(column_names=["a", "b"], use_threads=True, block_size=1 << 14)
    single = pacsv.ReadOptions(column_names=["a", "b"], use_threads=False)
    parse, convert = pacsv.ParseOptions(), pacsv.ConvertOptions()
    assert read_csv_block(body, threaded, parse, convert).equals(
        read_csv_block(body, single, parse, convert)
    )
    alone = sys.getrefcount(body)
    held = 0
    for _ in range(1000):  # handed the bytes themselves, a share of these held them
        table = read_csv_block(body, threaded, parse, convert)
        assert table.num_rows == rows.shape[0]
        del table
        held += sys.getrefcount(body) != alone
    assert held == 0
