"""EDF, EDF+ and BDF files written by pyedflib, read back through ingest: channels of one rate in
physical units, EDF+ annotations as events or labels, damaged files refused in one line."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import numpy as np
import pytest
from support import error_line, run_cli

from chunkfit.config import IngestOptions
from chunkfit.errors import SourceFormatError, UsageError
from chunkfit.ingest import ingest
from chunkfit.ingest.formats.edf import annotation_marks
from chunkfit.store import open_store

pyedflib = pytest.importorskip(
    "pyedflib", reason="the [edf] extra is not installed (make test installs it)"
)
from pyedflib import highlevel  # noqa: E402 - only once the extra is known to be installed

RATE = 128


def write_edf(
    path: Path,
    *,
    seconds: int = 20,
    slow: bool = False,
    annotations: list | None = None,
    bdf: bool = False,
    start: dt.datetime | None = None,
) -> list[np.ndarray]:
    """Two EEG channels at RATE (and a 1 Hz temperature with ``slow``); returns the signals."""
    rng = np.random.default_rng(3)
    signals = [np.sin(np.arange(seconds * RATE) / 5.0) * 80, rng.normal(0, 30, seconds * RATE)]
    names = ["EEG Fpz-Cz", "EEG Pz-Oz"]
    if slow:
        signals.append(36.5 + rng.normal(0, 0.1, seconds))
        names.append("Temp")
    digital = (-8388608, 8388607) if bdf else (-32768, 32767)
    headers = highlevel.make_signal_headers(
        names,
        sample_frequency=RATE,
        physical_min=-250,
        physical_max=250,
        digital_min=digital[0],
        digital_max=digital[1],
        dimension="uV",
    )
    if slow:
        headers[2].update(sample_frequency=1, physical_min=30, physical_max=45, dimension="degC")
    header = highlevel.make_header()
    header["annotations"] = annotations or []
    if start is not None:
        header["startdate"] = start
    kind = pyedflib.FILETYPE_BDFPLUS if bdf else pyedflib.FILETYPE_EDFPLUS
    highlevel.write_edf(str(path), signals, headers, header, file_type=kind)
    return signals


def resolution(bdf: bool) -> float:
    return 500.0 / ((1 << 24) - 1 if bdf else (1 << 16) - 1)


@pytest.mark.parametrize("bdf", [False, True], ids=["edf", "bdf"])
def test_file_reads_back_within_its_digital_resolution(
    tmp_path: Path, store_path: Path, bdf: bool
) -> None:
    path = tmp_path / ("rec.bdf" if bdf else "rec.edf")
    signals = write_edf(path, bdf=bdf)
    report = ingest(store_path, [str(path)])
    with open_store(store_path) as s:
        values = s.read(0, report.samples)
        assert (s.channels, s.sample_rate) == (["EEG Fpz-Cz", "EEG Pz-Oz"], float(RATE))
        source = s.info()["sources"][0]
        assert (source["format"], source["units"]) == (
            "EDF/BDF",
            {"EEG Fpz-Cz": "uV", "EEG Pz-Oz": "uV"},
        )
    assert report.samples == 20 * RATE
    np.testing.assert_allclose(values, np.stack(signals, axis=1), atol=resolution(bdf) + 1e-4)


def test_channels_of_another_rate_are_refused_naming_them_and_their_rates(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf", slow=True)
    with pytest.raises(
        SourceFormatError,
        match=r"rec\.edf: channels at different sampling rates \(EEG Fpz-Cz 128 Hz, EEG Pz-Oz "
        r"128 Hz, Temp 1 Hz\); chunkfit never resamples: pick channels of one rate with --columns",
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.edf")])
    assert not (tmp_path / "s.zarr").exists()


def test_columns_picks_channels_of_one_rate(tmp_path: Path) -> None:
    signals = write_edf(tmp_path / "rec.edf", slow=True)
    ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.edf")], IngestOptions(columns=("EEG Pz-Oz",)))
    with open_store(tmp_path / "s.zarr") as s:
        assert s.channels == ["EEG Pz-Oz"]
        np.testing.assert_allclose(
            s.read(0, 20 * RATE)[:, 0], signals[1], atol=resolution(False) + 1e-4
        )


def test_columns_picks_the_slow_channel_alone(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf", slow=True)
    report = ingest(
        tmp_path / "s.zarr", [str(tmp_path / "rec.edf")], IngestOptions(columns=("Temp",))
    )
    assert (report.samples, report.sample_rate) == (20, 1.0)


def test_edf_plus_annotations_matching_the_pattern_become_events(tmp_path: Path) -> None:
    marks = [[2.5, 1.0, "Seizure onset"], [7.0, -1, "Arousal"], [12.25, 0.5, "seizure end"]]
    write_edf(tmp_path / "rec.edf", annotations=marks)
    report = ingest(
        tmp_path / "s.zarr", [str(tmp_path / "rec.edf")], IngestOptions(annotations="seizure*")
    )
    with open_store(tmp_path / "s.zarr") as s:
        np.testing.assert_array_equal(s.events, [round(2.5 * RATE), round(12.25 * RATE)])
    assert report.events == 2


def test_label_from_annotations_labels_each_annotation_over_its_duration(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf", annotations=[[2.5, 1.0, "Seizure"], [7.0, -1, "Seizure"]])
    opts = IngestOptions(annotations="Seizure", label_from_annotations=True)
    ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.edf")], opts)
    expected = np.zeros(20 * RATE, dtype=np.int32)
    expected[320:448] = 1
    expected[896] = 1
    with open_store(tmp_path / "s.zarr") as s:
        np.testing.assert_array_equal(s.read_labels(0, 20 * RATE), expected)


def test_annotation_marks_example_from_its_docstring() -> None:
    events, spans = annotation_marks(
        np.array([1.5]), np.array([2.0]), ["Seizure start"], "seizure*", 100.0, 1000, "x"
    )
    assert (events.tolist(), spans.tolist()) == ([150], [[150, 350]])


def test_file_without_suffix_is_recognised_by_its_header(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf")
    shutil.copy(tmp_path / "rec.edf", tmp_path / "recording")
    assert ingest(tmp_path / "s.zarr", [str(tmp_path / "recording")]).samples == 20 * RATE


def test_truncated_file_is_refused_and_no_store_is_left(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf")
    data = (tmp_path / "rec.edf").read_bytes()
    (tmp_path / "rec.edf").write_bytes(data[: len(data) // 2])
    with pytest.raises(
        SourceFormatError,
        match=r"rec\.edf: the header declares 20 data records of 626 bytes after 1,024 header "
        r"bytes \(13,544 bytes\), the file has 6,772: truncated or damaged; copy it again",
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.edf")])
    assert not (tmp_path / "s.zarr").exists()


def test_header_that_disagrees_with_the_data_is_refused(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf")
    data = bytearray((tmp_path / "rec.edf").read_bytes())
    data[236:244] = b"40      "  # the header now promises 40 data records where the file holds 20
    (tmp_path / "rec.edf").write_bytes(bytes(data))
    with pytest.raises(
        SourceFormatError,
        match=r"rec\.edf: the header declares 40 data records .* the file has 13,544",
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.edf")])


def test_file_that_is_no_edf_is_refused_in_the_library_words(tmp_path: Path) -> None:
    (tmp_path / "rec.edf").write_bytes(b"0       " + b"x" * 400)
    with pytest.raises(
        SourceFormatError, match=r"rec\.edf: not a readable EDF/EDF\+/BDF file \(.+\)"
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.edf")])


def test_time_column_is_refused_for_edf(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf")
    with pytest.raises(
        UsageError,
        match=r"--time-column and --label-column apply to CSV and Parquet sources; EDF/BDF files "
        r"carry their own rate",
    ):
        ingest(tmp_path / "s.zarr", [str(tmp_path / "rec.edf")], IngestOptions(time_column="t"))


def test_cli_ingests_edf_with_annotations(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf", annotations=[[2.5, 1.0, "Seizure"]])
    result = run_cli("ingest", tmp_path / "s.h5", tmp_path / "rec.edf", "--annotations", "Seiz*")
    assert result.returncode == 0, result.stderr
    assert f"{20 * RATE:,} samples at 128 Hz, 1 segment(s), 1 event(s)" in result.stdout


def test_cli_truncated_file_is_one_line_and_prints_nothing_else(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf")
    data = (tmp_path / "rec.edf").read_bytes()
    (tmp_path / "rec.edf").write_bytes(data[:-100])
    result = run_cli("ingest", tmp_path / "s.zarr", tmp_path / "rec.edf")
    assert error_line(result).endswith("the file has 13,444: truncated or damaged; copy it again")
    assert result.stdout == ""


def test_cli_mixed_rates_is_one_line(tmp_path: Path) -> None:
    write_edf(tmp_path / "rec.edf", slow=True)
    line = error_line(run_cli("ingest", tmp_path / "s.zarr", tmp_path / "rec.edf"))
    assert line.endswith(
        "Temp 1 Hz); chunkfit never resamples: pick channels of one rate with --columns"
    )


def test_the_recording_start_is_stored_as_the_segments_utc_time(
    tmp_path: Path, store_path: Path
) -> None:
    path = tmp_path / "rec.edf"
    write_edf(path, start=dt.datetime(2024, 5, 1, 12, 30, 5))
    ingest(store_path, [str(path)])
    with open_store(store_path) as s:
        assert s.attrs["segment_times"] == [{"sample": 0, "utc": "2024-05-01T12:30:05.000000Z"}]
