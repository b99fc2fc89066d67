"""MiniSEED sources: files written by pymseed, read back through ingest and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from support import error_line, run_cli, siblings

import chunkfit
from chunkfit import IngestOptions
from chunkfit.errors import IncompatibleError, SourceFormatError
from chunkfit.ingest import ingest

pymseed = pytest.importorskip("pymseed")
Enc = pymseed.DataEncoding

T0 = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z, in ns
MS = 1_000_000  # one millisecond in ns
Z, N = "FDSN:XX_STA__H_H_Z", "FDSN:XX_STA__H_H_N"


def write_mseed(
    path: Path,
    sid: str,
    start_ns: int,
    data: np.ndarray,
    *,
    encoding: int = Enc.STEIM2,
    rate: float = 100.0,
    version: int = 3,
) -> Path:
    """Append records of one channel to ``path``, packed by pymseed itself."""
    kind = {np.dtype(np.int32): "i", np.dtype(np.float32): "f", np.dtype(np.float64): "d"}[
        data.dtype
    ]
    msr = pymseed.MS3Record(reclen=512, encoding=encoding)
    msr.formatversion = version
    msr.sourceid = sid
    msr.starttime = start_ns
    msr.samprate = rate
    with open(path, "ab") as f:
        f.writelines(msr.generate(data_samples=data, sample_type=kind))
    return path


def ramp(n: int, dtype: type = np.int32, scale: int = 3) -> np.ndarray:
    return (np.arange(n) * scale - n).astype(dtype)


def read_store(path: Path) -> tuple[list[str], float | None, np.ndarray, np.ndarray]:
    with chunkfit.open_store(path) as s:
        return s.channels, s.sample_rate, s.read(0, s.n_samples), s.segments.copy()


ENCODINGS = [
    ("steim1-v2", Enc.STEIM1, np.int32, 2),
    ("steim2-v2", Enc.STEIM2, np.int32, 2),
    ("steim1-v3", Enc.STEIM1, np.int32, 3),
    ("steim2-v3", Enc.STEIM2, np.int32, 3),
    ("int32", Enc.INT32, np.int32, 3),
    ("float32", Enc.FLOAT32, np.float32, 3),
    ("float64", Enc.FLOAT64, np.float64, 2),
]


@pytest.mark.parametrize(
    ("encoding", "dtype", "version"), [e[1:] for e in ENCODINGS], ids=[e[0] for e in ENCODINGS]
)
def test_each_encoding_reads_back_the_samples_written(
    tmp_path: Path, store_path: Path, encoding: int, dtype: type, version: int
) -> None:
    data = (
        ramp(2_000, dtype)
        if dtype is np.int32
        else (np.sin(np.arange(2_000) / 7) * 1e3).astype(dtype)
    )
    src = write_mseed(tmp_path / "z.mseed", Z, T0, data, encoding=encoding, version=version)
    ingest(store_path, [str(src)], IngestOptions())
    channels, rate, signal, segments = read_store(store_path)
    assert (channels, rate, segments.tolist()) == (["XX.STA..HHZ"], 100.0, [[0, 2_000]])
    np.testing.assert_array_equal(signal[:, 0], data.astype(np.float32))


def test_a_gap_splits_the_recording_into_two_segments_with_their_start_times(
    tmp_path: Path, store_path: Path
) -> None:
    data = ramp(1_000)
    src = write_mseed(tmp_path / "z.mseed", Z, T0, data[:400])
    write_mseed(src, Z, T0 + 400 * 10 * MS + 2_000 * MS, data[400:])  # 2 s missing after sample 400
    report = ingest(store_path, [str(src)], IngestOptions())
    _, _, signal, segments = read_store(store_path)
    assert (report.segments, segments.tolist()) == (2, [[0, 400], [400, 1_000]])
    np.testing.assert_array_equal(signal[:, 0], data)


def test_an_overlap_drops_the_repeated_samples_and_starts_a_segment(
    tmp_path: Path, store_path: Path
) -> None:
    data = ramp(1_000)
    src = write_mseed(tmp_path / "z.mseed", Z, T0, data[:500])
    write_mseed(src, Z, T0 + 450 * 10 * MS, data[450:])  # samples 450..499 sent twice
    ingest(store_path, [str(src)], IngestOptions())
    _, _, signal, segments = read_store(store_path)
    assert segments.tolist() == [[0, 500], [500, 1_000]]
    np.testing.assert_array_equal(signal[:, 0], data)


def test_two_files_recording_the_same_time_are_refused_naming_the_overlap(
    tmp_path: Path, store_path: Path
) -> None:
    data = ramp(1_000)
    first = write_mseed(tmp_path / "a.mseed", Z, T0, data[:600])
    again = write_mseed(tmp_path / "b.mseed", Z, T0 + 400 * 10 * MS, data[400:])
    with pytest.raises(
        IncompatibleError,
        match=re.escape(
            f"{again}: records 2023-11-14T22:13:24.000Z to 2023-11-14T22:13:26.000Z again (2 s), "
            f"already read from {first}; the store would hold those times twice: ingest one of "
            "the files, or each into a store of its own"
        ),
    ):
        ingest(store_path, [str(first), str(again)], IngestOptions())
    assert siblings(store_path) == ["a.mseed", "b.mseed"]


def test_files_that_follow_each_other_are_not_an_overlap(tmp_path: Path, store_path: Path) -> None:
    data = ramp(1_000)
    first = write_mseed(tmp_path / "a.mseed", Z, T0, data[:600])
    then = write_mseed(tmp_path / "b.mseed", Z, T0 + 600 * 10 * MS, data[600:])
    report = ingest(store_path, [str(first), str(then)], IngestOptions())
    assert (report.samples, report.notices) == (1_000, [])


def test_channels_a_fraction_of_a_sample_apart_are_aligned_with_a_notice(
    tmp_path: Path, store_path: Path
) -> None:
    src = tmp_path / "two.mseed"
    write_mseed(src, Z, T0, ramp(500))
    write_mseed(src, N, T0 + 3_750_000, -ramp(500))  # 0.375 samples after Z
    report = ingest(store_path, [str(src)], IngestOptions())
    assert report.notices == [
        f"{src}: XX.STA..HHZ starts 0.375 sample(s) before the stored time axis (0.00375 s); its "
        "samples were aligned to the nearest sample"
    ]


def test_the_cli_prints_the_alignment_notice_after_its_report(tmp_path: Path) -> None:
    src = tmp_path / "two.mseed"
    write_mseed(src, Z, T0, ramp(500))
    write_mseed(src, N, T0 + 3_750_000, -ramp(500))
    result = run_cli("ingest", tmp_path / "s.zarr", src)
    assert (result.returncode, result.stdout.splitlines()[1:]) == (
        0,
        [
            f"note: {src}: XX.STA..HHZ starts 0.375 sample(s) before the stored time axis "
            "(0.00375 s); its samples were aligned to the nearest sample"
        ],
    )


def test_two_channels_store_only_the_spans_both_cover(tmp_path: Path, store_path: Path) -> None:
    z, n = ramp(1_000), -ramp(1_000)
    src = tmp_path / "two.mseed"
    write_mseed(src, Z, T0, z[:600])
    write_mseed(src, N, T0 + 20 * MS, n[:600])  # starts two samples after Z
    write_mseed(src, Z, T0 + 7_000 * MS, z[600:])  # Z resumes at 7 s after a gap, ...
    write_mseed(src, N, T0 + 8_020 * MS, n[600:])  # ... N at 8.02 s after one of its own
    ingest(store_path, [str(src)], IngestOptions())
    channels, _, signal, segments = read_store(store_path)
    assert (channels, segments.tolist()) == (["XX.STA..HHZ", "XX.STA..HHN"], [[0, 598], [598, 896]])
    np.testing.assert_array_equal(signal[:598], np.stack([z[2:600], n[:598]], axis=1))
    np.testing.assert_array_equal(signal[598:], np.stack([z[702:1_000], n[600:898]], axis=1))


def test_two_instruments_of_the_same_hour_are_refused_saying_how_to_store_them(
    tmp_path: Path, store_path: Path
) -> None:
    one = write_mseed(tmp_path / "one.mseed", Z, T0, ramp(500))
    other = write_mseed(tmp_path / "other.mseed", "FDSN:YY_OTH__H_H_Z", T0, ramp(500))
    with pytest.raises(
        IncompatibleError,
        match=re.escape(
            f"{other}: channels ['YY.OTH..HHZ'] differ from ['XX.STA..HHZ'] of {one}; a store "
            "holds one set of channels: ingest each instrument into a store of its own, or, if "
            "they are one channel under two names, give it one name with --names XX.STA..HHZ"
        ),
    ):
        ingest(store_path, [str(one), str(other)], IngestOptions())
    assert siblings(store_path) == ["one.mseed", "other.mseed"]


def test_channels_at_different_rates_are_refused_naming_each_rate(
    tmp_path: Path, store_path: Path
) -> None:
    src = write_mseed(tmp_path / "mixed.mseed", Z, T0, ramp(500))
    write_mseed(src, "FDSN:XX_STA__L_H_Z", T0, ramp(50), rate=1.0)
    with pytest.raises(
        IncompatibleError,
        match=re.escape(
            "the channels have different sample rates (XX.STA..HHZ 100 Hz, XX.STA..LHZ 1 Hz); a "
            "store has one rate: pick channels of one rate with --columns"
        ),
    ):
        ingest(store_path, [str(src)], IngestOptions())
    assert siblings(store_path) == ["mixed.mseed"]


def test_columns_picks_the_channels_of_one_rate_from_a_mixed_file(
    tmp_path: Path, store_path: Path
) -> None:
    src = write_mseed(tmp_path / "mixed.mseed", Z, T0, ramp(500))
    write_mseed(src, "FDSN:XX_STA__L_H_Z", T0, ramp(50), rate=1.0)
    ingest(store_path, [str(src)], IngestOptions(columns=("XX.STA..LHZ",)))
    channels, rate, signal, _ = read_store(store_path)
    assert (channels, rate, signal.shape) == (["XX.STA..LHZ"], 1.0, (50, 1))


def test_files_given_out_of_time_order_append_in_time_order(
    tmp_path: Path, store_path: Path
) -> None:
    data = ramp(1_000)
    late = write_mseed(tmp_path / "day2.mseed", Z, T0 + 5_000 * MS, data[500:])
    early = write_mseed(tmp_path / "day1.mseed", Z, T0, data[:500])
    report = ingest(store_path, [str(late), str(early)], IngestOptions())
    _, _, signal, segments = read_store(store_path)
    assert [s["name"] for s in report.sources] == [str(early), str(late)]
    assert segments.tolist() == [[0, 500], [500, 1_000]]
    np.testing.assert_array_equal(signal[:, 0], data)


def test_garbage_in_the_middle_is_refused_naming_the_byte(tmp_path: Path, store_path: Path) -> None:
    src = write_mseed(tmp_path / "bad.mseed", Z, T0, ramp(3_000), version=2)
    raw = src.read_bytes()
    src.write_bytes(raw[:1024] + b"\x17garbage!" * 40 + raw[1024:])
    with pytest.raises(
        SourceFormatError, match=re.escape(f"{src}: damaged MiniSEED data at byte 1,024: ")
    ):
        ingest(store_path, [str(src)], IngestOptions())
    assert siblings(store_path) == ["bad.mseed"]


def test_a_truncated_file_is_refused_by_the_cli_with_one_line(tmp_path: Path) -> None:
    src = write_mseed(tmp_path / "cut.mseed", Z, T0, ramp(3_000), version=2)
    src.write_bytes(src.read_bytes()[:1300])
    result = run_cli("ingest", "out.zarr", "cut.mseed", cwd=tmp_path)
    assert error_line(result).startswith(
        "chunkfit: error: cut.mseed: damaged MiniSEED data at byte 1,024: "
    )
    assert siblings(tmp_path / "out.zarr") == ["cut.mseed"]


def test_a_file_without_its_suffix_is_recognised_by_its_records(tmp_path: Path) -> None:
    src = write_mseed(tmp_path / "recording", Z, T0, ramp(700), version=2)
    result = run_cli("ingest", "out.h5", src.name, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    channels, rate, signal, _ = read_store(tmp_path / "out.h5")
    assert (channels, rate) == (["XX.STA..HHZ"], 100.0)
    np.testing.assert_array_equal(signal[:, 0], ramp(700))


def test_small_blocks_stream_the_channels_in_step(tmp_path: Path, store_path: Path) -> None:
    z, n = ramp(5_000), -ramp(5_000, scale=5)
    src = write_mseed(tmp_path / "two.mseed", Z, T0, z)
    write_mseed(src, N, T0, n, encoding=Enc.STEIM1)
    ingest(
        store_path, [str(src)], IngestOptions(block_bytes=328)
    )  # 41 rows a block, records of ~200
    _, _, signal, segments = read_store(store_path)
    assert segments.tolist() == [[0, 5_000]]
    np.testing.assert_array_equal(signal, np.stack([z, n], axis=1))


def test_a_channel_that_changes_rate_is_refused_naming_the_byte(
    tmp_path: Path, store_path: Path
) -> None:
    src = write_mseed(tmp_path / "rates.mseed", Z, T0, ramp(300), version=2)
    at = src.stat().st_size
    write_mseed(src, Z, T0 + 3_000 * MS, ramp(300), rate=50.0, version=2)
    with pytest.raises(
        SourceFormatError,
        match=re.escape(
            f"{src}: XX.STA..HHZ changes rate from 100 Hz to 50 Hz at byte {at:,}; split the file "
            "where the rate changes and ingest the parts into separate stores"
        ),
    ):
        ingest(store_path, [str(src)], IngestOptions())


def test_each_segment_of_a_record_with_a_gap_keeps_its_utc_start(
    tmp_path: Path, store_path: Path
) -> None:
    path = write_mseed(tmp_path / "a.mseed", Z, T0, ramp(300))
    write_mseed(path, Z, T0 + 8_300 * MS, ramp(200))  # 5.3 s of gap after 3 s of samples
    ingest(store_path, [str(path)])
    with chunkfit.open_store(store_path) as s:
        assert s.attrs["segment_times"] == [
            {"sample": 0, "utc": "2023-11-14T22:13:20.000000Z"},
            {"sample": 300, "utc": "2023-11-14T22:13:28.300000Z"},
        ]


def test_info_shows_each_segments_start_time(tmp_path: Path) -> None:
    path = write_mseed(tmp_path / "a.mseed", Z, T0, ramp(300))
    write_mseed(path, Z, T0 + 8_300 * MS, ramp(200))
    assert run_cli("ingest", tmp_path / "s.zarr", path).returncode == 0
    out = run_cli("info", tmp_path / "s.zarr").stdout
    assert "[0, 300) from 2023-11-14T22:13:20.000000Z" in out
    assert "[300, 500) from 2023-11-14T22:13:28.300000Z" in out
