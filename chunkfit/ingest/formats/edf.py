"""EDF, EDF+ and BDF (24-bit) recordings, read by range with ``pyedflib``: the channels of one
sampling rate in physical units; EDF+ annotations whose text matches ``--annotations`` as events
(at their onset) or, with ``--label-from-annotations``, labels over their duration.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
from pathlib import Path
from typing import Any

import numpy as np

from ..._quiet import Silenced
from ...config import IngestOptions
from ...errors import SourceFormatError
from .base import RecordingSource, pick_columns, refuse_text_options, require


def annotation_marks(
    onsets: np.ndarray,
    durations: np.ndarray,
    texts: list[str],
    pattern: str,
    rate: float,
    n_rows: int,
    where: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Events (onsets, in samples) and spans [onset, onset + duration) of matching annotations.

    The match is a case-blind glob on the text. Example at 100 Hz: onset 1.5 s, duration 2 s, text
    "Seizure start" with pattern "seizure*" -> event 150, span [150, 350); a duration of 0 (or none)
    spans one sample.
    """
    events: list[int] = []
    spans: list[tuple[int, int]] = []
    for k, (onset, duration, text) in enumerate(zip(onsets, durations, texts, strict=True)):
        if not fnmatch.fnmatchcase(text.strip().lower(), pattern.lower()):
            continue
        start = round(float(onset) * rate)
        if not 0 <= start < n_rows:
            raise SourceFormatError(
                f"{where}: annotation {k} (counted from 0) {text.strip()!r} at {float(onset):g} s "
                f"lies outside the recording ({n_rows / rate:g} s)"
            )
        length = (
            round(float(duration) * rate) if duration is not None and float(duration) > 0 else 1
        )
        events.append(start)
        spans.append((start, min(n_rows, start + max(1, length))))
    return np.asarray(events, dtype=np.int64), np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def check_size(spec: str, path: Path) -> None:
    """The file holds the data records its header declares: header bytes + records x record bytes.

    Fields (ASCII, fixed width): header bytes at [184, 192), data records at [236, 244), signals
    ns at [252, 256); each signal's samples per record at 256 + 216 * ns + 8 * i. Samples take
    2 bytes in EDF, 3 in BDF (whose first byte is 0xFF).
    """
    with open(path, "rb") as f:
        head = f.read(256)
        try:
            header_bytes, records, ns = int(head[184:192]), int(head[236:244]), int(head[252:256])
            f.seek(256 + 216 * ns)
            per_record = [int(f.read(8)) for _ in range(ns)]
        except ValueError:
            return  # not a header these fields describe: let the library say what is wrong
    sample_bytes = 3 if head[:1] == b"\xff" else 2
    record_bytes = sample_bytes * sum(per_record)
    expected = header_bytes + records * record_bytes
    size = path.stat().st_size
    if records >= 0 and size != expected:
        raise SourceFormatError(
            f"{spec}: the header declares {records:,} data records of {record_bytes:,} bytes after "
            f"{header_bytes:,} header bytes ({expected:,} bytes), the file has {size:,}: truncated "
            "or damaged; copy it again"
        )


class EdfSource(RecordingSource):
    format = "EDF/BDF"

    def __init__(self, spec: str, path: Path, options: IngestOptions) -> None:
        refuse_text_options(spec, "EDF/BDF", options)
        pyedflib = require("pyedflib", "edf", spec, "EDF/BDF files")
        check_size(spec, path)
        try:
            with Silenced(1):  # edflib prints its reasons on stdout as well as raising
                self.reader = pyedflib.EdfReader(str(path))
        except OSError as err:
            raise SourceFormatError(
                f"{spec}: not a readable EDF/EDF+/BDF file ({_reason(err)})"
            ) from None
        try:
            self._open(spec, path, options)
        except BaseException:
            self.reader.close()
            raise

    def _open(self, spec: str, path: Path, options: IngestOptions) -> None:
        r = self.reader
        labels = [label.strip() for label in r.getSignalLabels()]
        rates = [float(f) for f in r.getSampleFrequencies()]
        counts = [int(n) for n in r.getNSamples()]
        if not labels:
            raise SourceFormatError(
                f"{spec}: the file holds no signals (annotations only); nothing to ingest"
            )
        chosen = pick_columns(spec, labels, options.columns)
        picked_rates = {rates[i] for i in chosen}
        if len(picked_rates) > 1:
            listing = ", ".join(f"{labels[i]} {rates[i]:g} Hz" for i in chosen)
            raise SourceFormatError(
                f"{spec}: channels at different sampling rates ({listing}); chunkfit never "
                "resamples: pick channels of one rate with --columns"
            )
        rate = picked_rates.pop()
        n_rows = min(counts[i] for i in chosen)
        self._signal = chosen
        events = spans = None
        if options.annotations is not None:
            onsets, durations, texts = r.readAnnotations()
            events, spans = annotation_marks(
                np.asarray(onsets),
                np.asarray(durations),
                [str(t) for t in texts],
                options.annotations,
                rate,
                n_rows,
                spec,
            )
        start = r.getStartdatetime().replace(tzinfo=dt.UTC).timestamp()
        # The base class picks channels by --columns again; give it only the chosen ones.
        narrowed = dataclasses.replace(options, columns=None)
        super().__init__(
            spec,
            [path],
            narrowed,
            [labels[i] for i in chosen],
            n_rows,
            rate,
            start_time=start,
            events=events,
            spans=spans,
        )
        self.units = [r.getPhysicalDimension(i).strip() for i in chosen]

    def _read(self, a: int, b: int) -> np.ndarray:
        out = np.empty((b - a, len(self._signal)), dtype=np.float64)
        for j, i in enumerate(self._signal):
            out[:, j] = self.reader.readSignal(i, a, b - a)
        return out

    def blocks(self) -> Any:
        try:
            yield from super().blocks()
        finally:
            self.reader.close()


def _reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def open_source(spec: str, path: Path, options: IngestOptions) -> EdfSource:
    return EdfSource(spec, path, options)
