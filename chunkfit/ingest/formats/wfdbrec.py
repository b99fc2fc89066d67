"""WFDB records (PhysioNet): ``record.hea`` and its signal files, read by range with the ``wfdb``
package; every channel in physical units at the record's rate; annotations as events or labels.

The header's promises are checked against the data: each signal file must hold the samples the
header declares, and each signal's checksum must match the samples read.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...config import IngestOptions
from ...errors import SourceFormatError, SourceNotFoundError
from ..block import ParsedBlock
from .base import RecordingSource, refuse_text_options, require

# What wfdb raises on a damaged header, signal or annotation file: it has no error class of its own.
WFDB_ERRORS = (ValueError, IndexError, TypeError, KeyError, OSError, EOFError)

# Bytes per sample of each WFDB storage format (format 0 has no file).
FORMAT_BYTES = {
    "8": 1,
    "16": 2,
    "24": 3,
    "32": 4,
    "61": 2,
    "80": 1,
    "160": 2,
    "212": 1.5,
    "310": 4 / 3,
    "311": 4 / 3,
}


def kept_annotations(
    samples: np.ndarray,
    symbols: Sequence[str],
    aux: Sequence[str],
    keep: Sequence[str] | None,
    n_rows: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Event samples and label spans [a, b) of the annotations ``keep`` names (all when None).

    A beat symbol (``V``) keeps that annotation, a span [s, s + 1). A rhythm name (``(AFIB``) keeps
    the rhythm-change annotations ('+') whose note names it, each a span to the next rhythm change
    (or the end). Example: samples [5, 9, 20], symbols ['+', 'V', '+'], aux ['(AFIB', '', '(N'],
    keep ['(AFIB', 'V'], 30 rows -> events [5, 9], spans [[5, 20], [9, 10]].
    """
    samples = np.asarray(samples, dtype=np.int64)
    events: list[int] = []
    spans: list[tuple[int, int]] = []
    rhythm_at = [i for i, s in enumerate(symbols) if s == "+"]
    for i, (s, sym) in enumerate(zip(samples.tolist(), symbols, strict=False)):
        note = aux[i].strip("\x00 ") if i < len(aux) else ""
        if sym == "+":
            if keep is not None and not any(k.startswith("(") and note == k for k in keep):
                continue
            later = [samples[j] for j in rhythm_at if j > i]
            spans.append((s, int(later[0]) if later else n_rows))
        elif keep is not None and not any(fnmatch.fnmatchcase(sym, k) for k in keep):
            continue
        else:
            spans.append((s, s + 1))
        events.append(s)
    return np.asarray(events, dtype=np.int64), np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def _record_base(spec: str, path: Path) -> Path:
    if path.suffix.lower() in (".hea", ".dat"):
        return path.with_suffix("")
    return path


def _start_time(header: Any) -> float | None:
    if header.base_time is None:
        return None
    date = header.base_date or dt.date(1970, 1, 1)
    when = dt.datetime.combine(date, header.base_time, tzinfo=dt.UTC)
    return when.timestamp()


class WfdbSource(RecordingSource):
    format = "WFDB"

    def __init__(self, spec: str, path: Path, options: IngestOptions) -> None:
        refuse_text_options(spec, "WFDB", options)
        self.wfdb = require("wfdb", "wfdb", spec, "WFDB records")
        base = _record_base(spec, path)
        hea = base.with_suffix(".hea")
        if not hea.is_file():
            raise SourceNotFoundError(
                f"{spec}: no header {hea.name} beside it; a WFDB record needs its .hea file"
            )
        try:
            header = self.wfdb.rdheader(str(base))
        except WFDB_ERRORS as err:
            raise SourceFormatError(
                f"{hea}: not a readable WFDB header ({_first_line(err)})"
            ) from None
        if getattr(header, "seg_name", None) is not None:
            raise SourceFormatError(
                f"{hea}: a multi-segment WFDB record; ingest each segment's record instead"
            )
        if not header.sig_len or not header.n_sig:
            raise SourceFormatError(f"{hea}: the header declares no samples; nothing to ingest")
        self.header = header
        self.base = base
        files = self._check_files(hea)
        self._refuse_other_rates(hea, options)
        events, spans = self._annotations(spec, options)
        super().__init__(
            spec,
            [hea, *files],
            options,
            header.sig_name,
            int(header.sig_len),
            float(header.fs),
            start_time=_start_time(header),
            utc_start=header.base_date is not None,  # a base time alone is a time of day
            events=events,
            spans=spans,
        )
        self.units = [header.units[i] for i in self._cols]
        self._sums = np.zeros(header.n_sig, dtype=np.int64)

    def _check_files(self, hea: Path) -> list[Path]:
        """Each signal file holds the frames the header declares (a short file is refused)."""
        h = self.header
        per_file: dict[str, float] = {}
        for i, name in enumerate(h.file_name):
            if h.fmt[i] not in FORMAT_BYTES:
                raise SourceFormatError(
                    f"{hea}: signal {h.sig_name[i]!r} uses WFDB format {h.fmt[i]}, which chunkfit "
                    "does not read"
                )
            per_file[name] = per_file.get(name, 0) + FORMAT_BYTES[h.fmt[i]] * (
                h.samps_per_frame[i] or 1
            )
        files = []
        for name, frame_bytes in per_file.items():
            f = hea.parent / name
            if not f.is_file():
                raise SourceNotFoundError(
                    f"{hea}: its signal file {name} is missing; copy it beside the header"
                )
            offset = next((h.byte_offset[i] or 0) for i, n in enumerate(h.file_name) if n == name)
            need = offset + math.ceil(frame_bytes * h.sig_len)
            have = f.stat().st_size
            if have < need - 1:
                raise SourceFormatError(
                    f"{f}: truncated: {hea.name} promises {h.sig_len:,} samples ({need:,} bytes), "
                    f"the file has {have:,} bytes; copy the record again"
                )
            files.append(f)
        return files

    def _refuse_other_rates(self, hea: Path, options: IngestOptions) -> None:
        h = self.header
        chosen = (
            range(h.n_sig)
            if options.columns is None
            else [
                h.sig_name.index(c) if c in h.sig_name else int(c)
                for c in options.columns
                if c in h.sig_name or c.isdigit()
            ]
        )
        fast = [
            f"{h.sig_name[i]} ({h.fs * h.samps_per_frame[i]:g} Hz)"
            for i in chosen
            if (h.samps_per_frame[i] or 1) > 1
        ]
        if fast:
            raise SourceFormatError(
                f"{hea}: channels at other rates than the record's {h.fs:g} Hz: {', '.join(fast)}; "
                "chunkfit never resamples: leave them out with --columns"
            )

    def _annotations(
        self, spec: str, options: IngestOptions
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        if options.annotations is None:
            return None, None
        ann_path = self.base.with_name(f"{self.base.name}.{options.annotations}")
        if not ann_path.is_file():
            raise SourceNotFoundError(
                f"{spec}: no annotation file {ann_path.name} beside the record; check "
                "--annotations (the annotator's suffix, e.g. atr)"
            )
        try:
            ann = self.wfdb.rdann(str(self.base), options.annotations)
        except WFDB_ERRORS as err:
            raise SourceFormatError(
                f"{ann_path}: not a readable WFDB annotation file ({_first_line(err)})"
            ) from None
        if ann.fs is not None and abs(float(ann.fs) - float(self.header.fs)) > 1e-6 * float(
            self.header.fs
        ):
            raise SourceFormatError(
                f"{ann_path}: annotations at {float(ann.fs):g} Hz for a record at "
                f"{float(self.header.fs):g} Hz; is it the annotation file of another record?"
            )
        samples = np.asarray(ann.sample, dtype=np.int64)
        beyond = np.flatnonzero((samples < 0) | (samples >= self.header.sig_len))
        if beyond.size:
            k = int(beyond[0])
            raise SourceFormatError(
                f"{ann_path}: annotation {k} (counted from 0) at sample {int(samples[k]):,} lies "
                f"outside the record's {self.header.sig_len:,} samples; is it the annotation file "
                "of another record?"
            )
        aux = list(ann.aux_note) if ann.aux_note is not None else [""] * len(samples)
        return kept_annotations(
            samples, list(ann.symbol), aux, options.symbols, int(self.header.sig_len)
        )

    def _read(self, a: int, b: int) -> np.ndarray:
        try:
            rec = self.wfdb.rdrecord(str(self.base), sampfrom=a, sampto=b, physical=False)
        except WFDB_ERRORS as err:
            raise SourceFormatError(
                f"{self.name}: samples {a:,}-{b:,} are unreadable ({_first_line(err)})"
            ) from None
        digital = np.asarray(rec.d_signal)
        self._sums += digital.sum(axis=0, dtype=np.int64)
        return rec.dac(return_res=64)

    def blocks(self) -> Iterator[ParsedBlock]:
        yield from super().blocks()
        self._check_sums()

    def _check_sums(self) -> None:
        h = self.header
        for i, expected in enumerate(h.checksum or []):
            if expected is None:
                continue
            got = int(self._sums[i]) & 0xFFFF  # the 16-bit sum; headers write it signed or not
            if got != int(expected) & 0xFFFF:
                got = got - 0x10000 if got >= 0x8000 else got
                raise SourceFormatError(
                    f"{self.base.with_suffix('.hea')}: signal {h.sig_name[i]!r} has checksum "
                    f"{got}, the header says {int(expected)}: the signal file and its header "
                    "disagree; copy the record again"
                )


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def open_source(spec: str, path: Path, options: IngestOptions) -> WfdbSource:
    return WfdbSource(spec, path, options)
