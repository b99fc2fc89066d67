"""WFDB records through ingest: files written by the wfdb package itself and the shipped MIT-BIH
record 100, read back in physical units with annotations as events or labels."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest
from support import REPO, error_line, run_cli

from chunkfit.config import IngestOptions
from chunkfit.errors import SourceFormatError, SourceNotFoundError
from chunkfit.ingest import ingest
from chunkfit.ingest.formats.wfdbrec import kept_annotations
from chunkfit.store import open_store

wfdb = pytest.importorskip(
    "wfdb", reason="the [wfdb] extra is not installed (make test installs it)"
)

MITDB = REPO / "data" / "mitdb100" / "100"
RATE = 250.0
GAIN = np.array([200.0, 50.0])
BASELINE = np.array([10, -3])


def write_record(
    folder: Path,
    name: str = "rec",
    rows: int = 3000,
    fmt: str = "16",
    base: tuple[dt.date | None, dt.time] | None = None,
) -> np.ndarray:
    """A two-channel record of known digital samples (from ``base``: date and time); returns them
    [rows, 2]."""
    rng = np.random.default_rng(7)
    digital = rng.integers(-2000, 2000, size=(rows, 2)).astype(np.int64)
    wfdb.wrsamp(
        name,
        fs=RATE,
        units=["mV", "uV"],
        sig_name=["lead I", "lead II"],
        d_signal=digital,
        fmt=[fmt, fmt],
        adc_gain=list(GAIN),
        baseline=list(BASELINE),
        write_dir=str(folder),
        base_date=base[0] if base is not None else None,
        base_time=base[1] if base is not None else None,
    )
    return digital


def physical(digital: np.ndarray) -> np.ndarray:
    return ((digital - BASELINE) / GAIN).astype(np.float32)


def test_record_reads_back_in_physical_units(tmp_path: Path, store_path: Path) -> None:
    digital = write_record(tmp_path)
    report = ingest(store_path, [str(tmp_path / "rec.hea")])
    with open_store(store_path) as s:
        values = s.read(0, s.info()["samples"])
        assert (s.channels, s.sample_rate, report.samples) == (["lead I", "lead II"], RATE, 3000)
        source = s.info()["sources"][0]
        assert (source["format"], source["units"]) == ("WFDB", {"lead I": "mV", "lead II": "uV"})
    np.testing.assert_array_equal(values, physical(digital))


def test_record_named_without_suffix_is_found(tmp_path: Path) -> None:
    write_record(tmp_path)
    report = ingest(tmp_path / "s.zarr", [str(tmp_path / "rec")])
    assert report.samples == 3000


def test_signal_file_named_instead_of_header_reads_the_record(tmp_path: Path) -> None:
    write_record(tmp_path)
    report = ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.dat")])
    assert report.sample_rate == RATE


def test_format_212_record_reads_back(tmp_path: Path) -> None:
    digital = write_record(tmp_path, fmt="212", rows=2001)
    ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")])
    with open_store(tmp_path / "s.zarr") as s:
        np.testing.assert_array_equal(s.read(0, 2001), physical(digital))


def test_columns_picks_one_lead(tmp_path: Path) -> None:
    digital = write_record(tmp_path)
    ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")], IngestOptions(columns=("lead II",)))
    with open_store(tmp_path / "s.zarr") as s:
        assert s.channels == ["lead II"]
        np.testing.assert_array_equal(s.read(0, 3000)[:, 0], physical(digital)[:, 1])


def test_shipped_mitdb_record_matches_wfdb_and_keeps_its_premature_beats(tmp_path: Path) -> None:
    opts = IngestOptions(annotations="atr", symbols=("A", "V"))
    report = ingest(tmp_path / "s.zarr", [str(MITDB) + ".hea"], opts)
    ann = wfdb.rdann(str(MITDB), "atr")
    expected = np.array(
        [s for s, sym in zip(ann.sample, ann.symbol, strict=True) if sym in ("A", "V")]
    )
    reference = wfdb.rdrecord(str(MITDB), sampto=20_000).p_signal.astype(np.float32)
    with open_store(tmp_path / "s.zarr") as s:
        assert (s.channels, s.sample_rate, report.samples) == (["MLII", "V5"], 360.0, 650_000)
        np.testing.assert_array_equal(s.events, expected)
        np.testing.assert_array_equal(s.read(0, 20_000), reference)
    assert expected.size == 34


def test_annotations_without_symbols_keep_every_annotation(tmp_path: Path) -> None:
    write_record(tmp_path)
    wfdb.wrann(
        "rec",
        "atr",
        np.array([10, 500, 900]),
        symbol=["N", "V", "N"],
        fs=RATE,
        write_dir=str(tmp_path),
    )
    report = ingest(
        tmp_path / "s.zarr", [str(tmp_path / "rec.hea")], IngestOptions(annotations="atr")
    )
    with open_store(tmp_path / "s.zarr") as s:
        np.testing.assert_array_equal(s.events, [10, 500, 900])
    assert report.events == 3


def test_label_from_annotations_labels_beats_and_rhythm_spans(tmp_path: Path) -> None:
    write_record(tmp_path)
    wfdb.wrann(
        "rec",
        "atr",
        np.array([100, 400, 1000, 2000]),
        symbol=["+", "V", "+", "N"],
        aux_note=["(AFIB", "", "(N", ""],
        fs=RATE,
        write_dir=str(tmp_path),
    )
    opts = IngestOptions(annotations="atr", symbols=("(AFIB", "V"), label_from_annotations=True)
    ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")], opts)
    expected = np.zeros(3000, dtype=np.int32)
    expected[100:1000] = 1
    with open_store(tmp_path / "s.zarr") as s:
        np.testing.assert_array_equal(s.read_labels(0, 3000), expected)


def test_kept_annotations_example_from_its_docstring() -> None:
    events, spans = kept_annotations(
        np.array([5, 9, 20]), ["+", "V", "+"], ["(AFIB", "", "(N"], ["(AFIB", "V"], 30
    )
    assert events.tolist() == [5, 9]
    assert spans.tolist() == [[5, 20], [9, 10]]


def test_truncated_signal_file_is_refused_and_no_store_is_left(tmp_path: Path) -> None:
    write_record(tmp_path)
    dat = tmp_path / "rec.dat"
    dat.write_bytes(dat.read_bytes()[:5000])
    with pytest.raises(
        SourceFormatError,
        match=r"rec\.dat: truncated: rec\.hea promises 3,000 samples \(12,000 bytes\), the file "
        r"has 5,000 bytes",
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")])
    assert not (tmp_path / "s.zarr").exists()


def test_signal_that_disagrees_with_the_header_checksum_is_refused(tmp_path: Path) -> None:
    write_record(tmp_path)
    dat = tmp_path / "rec.dat"
    data = bytearray(dat.read_bytes())
    data[100] ^= 0x40
    dat.write_bytes(bytes(data))
    with pytest.raises(
        SourceFormatError,
        match=r"signal 'lead I' has checksum .* the signal file and its header disagree",
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")])
    assert not (tmp_path / "s.zarr").exists()


def test_annotation_file_of_a_longer_record_is_refused(tmp_path: Path) -> None:
    write_record(tmp_path)
    wfdb.wrann(
        "rec", "atr", np.array([10, 5000]), symbol=["N", "V"], fs=RATE, write_dir=str(tmp_path)
    )
    with pytest.raises(
        SourceFormatError,
        match=r"annotation 1 \(counted from 0\) at sample 5,000 lies outside the record's 3,000 "
        r"samples; is it the annotation file of another record\?",
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")], IngestOptions(annotations="atr"))


def test_annotation_file_at_another_rate_is_refused(tmp_path: Path) -> None:
    write_record(tmp_path)
    wfdb.wrann("rec", "atr", np.array([10]), symbol=["N"], fs=360, write_dir=str(tmp_path))
    with pytest.raises(SourceFormatError, match=r"annotations at 360 Hz for a record at 250 Hz"):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")], IngestOptions(annotations="atr"))


def test_missing_annotation_file_is_named(tmp_path: Path) -> None:
    write_record(tmp_path)
    with pytest.raises(SourceNotFoundError, match=r"no annotation file rec\.qrs beside the record"):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")], IngestOptions(annotations="qrs"))


def test_missing_signal_file_is_named(tmp_path: Path) -> None:
    write_record(tmp_path)
    (tmp_path / "rec.dat").unlink()
    with pytest.raises(SourceNotFoundError, match=r"its signal file rec\.dat is missing"):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.hea")])


def test_channel_at_another_rate_is_refused_naming_it(tmp_path: Path) -> None:
    digital = np.arange(2 * 1000 * 3, dtype=np.int64).reshape(-1, 1) % 100
    wfdb.wrsamp(
        "multi",
        fs=100,
        units=["mV", "mV"],
        sig_name=["slow", "fast"],
        e_d_signal=[digital[:1000, 0], digital[:2000, 0]],
        samps_per_frame=[1, 2],
        fmt=["16", "16"],
        adc_gain=[1.0, 1.0],
        baseline=[0, 0],
        write_dir=str(tmp_path),
    )
    with pytest.raises(
        SourceFormatError,
        match=r"channels at other rates than the record's 100 Hz: fast \(200 Hz\); chunkfit never "
        r"resamples",
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "multi.hea")])


def test_cli_ingests_a_record_with_its_annotations(tmp_path: Path) -> None:
    write_record(tmp_path)
    wfdb.wrann(
        "rec", "atr", np.array([10, 500]), symbol=["N", "V"], fs=RATE, write_dir=str(tmp_path)
    )
    result = run_cli(
        "ingest",
        tmp_path / "s.zarr",
        tmp_path / "rec.hea",
        "--annotations",
        "atr",
        "--symbols",
        "V",
    )
    assert result.returncode == 0, result.stderr
    assert "3,000 samples at 250 Hz, 1 segment(s), 1 event(s)" in result.stdout


def test_cli_truncated_record_is_one_line(tmp_path: Path) -> None:
    write_record(tmp_path)
    (tmp_path / "rec.dat").write_bytes(b"\0" * 10)
    line = error_line(run_cli("ingest", tmp_path / "s.zarr", tmp_path / "rec.hea"))
    assert line.endswith(
        "rec.dat: truncated: rec.hea promises 3,000 samples (12,000 bytes), the file has 10 "
        "bytes; copy the record again"
    )
    assert not (tmp_path / "s.zarr").exists()


def test_a_base_date_and_time_are_stored_as_the_segments_utc_time(
    tmp_path: Path, store_path: Path
) -> None:
    write_record(tmp_path, base=(dt.date(2024, 5, 1), dt.time(8, 15, 0, 250_000)))
    ingest(store_path, [str(tmp_path / "rec")])
    with open_store(store_path) as s:
        assert s.attrs["segment_times"] == [{"sample": 0, "utc": "2024-05-01T08:15:00.250000Z"}]


def test_a_base_time_without_a_date_is_no_utc_time(tmp_path: Path, store_path: Path) -> None:
    write_record(tmp_path, base=(None, dt.time(8, 15, 0)))
    ingest(store_path, [str(tmp_path / "rec")])
    with open_store(store_path) as s:
        assert s.attrs["segment_times"] == [{"sample": 0, "seconds": 29700.0, "source": 0}]
