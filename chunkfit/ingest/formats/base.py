"""What the recording formats share: importing their optional library, channel choice, labels from
annotation spans, file hashes, and reading a random-access recording in blocks of rows.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ...config import IngestOptions
from ...errors import MissingExtraError, UsageError
from ..block import ParsedBlock
from ..source import Source


def pick_columns(spec: str, names: Sequence[str], columns: Sequence[str] | None) -> list[int]:
    """Indices of the channels ``--columns`` names (by name or 0-based position); all by default."""
    if columns is None:
        return list(range(len(names)))
    idx: list[int] = []
    for c in columns:
        if c in names:
            i = list(names).index(c)
        elif c.isdigit() and int(c) < len(names):
            i = int(c)
        else:
            raise UsageError(
                f"{spec}: --columns {c!r} is not a channel (channels: {', '.join(names)})"
            )
        if i in idx:
            raise UsageError(
                f"{spec}: --columns names channel {names[i]!r} twice; name each channel once"
            )
        idx.append(i)
    return idx


def refuse_text_options(spec: str, what: str, options: IngestOptions) -> None:
    """--time-column and --label-column name CSV columns; a recording has none."""
    if options.time_column is not None or options.label_column is not None:
        raise UsageError(
            f"{spec}: --time-column and --label-column apply to CSV and Parquet sources; {what} "
            "files carry their own rate and times (use --label-from-annotations for labels)"
        )


def span_labels(spans: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Per-sample labels of rows [start, stop): 1 inside a span [a, b) of ``spans`` (k x 2), else 0.

    Example: spans [[2, 4], [9, 10]], rows [0, 6) -> [0, 0, 1, 1, 0, 0].
    """
    out = np.zeros(stop - start, dtype=np.int32)
    for a, b in np.asarray(spans, dtype=np.int64).reshape(-1, 2):
        lo, hi = max(int(a), start), min(int(b), stop)
        if hi > lo:
            out[lo - start : hi - start] = 1
    return out


def files_sha256(paths: Sequence[Path]) -> str:
    """One digest over the bytes of every file of a recording, in order."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


class RecordingSource(Source):
    """A recording read by row range: subclasses give ``_read(a, b)`` of all its channels."""

    units: list[str] | None = None  # physical unit of each chosen channel, when the file says

    def __init__(
        self,
        spec: str,
        files: Sequence[Path],
        options: IngestOptions,
        names: Sequence[str],
        n_rows: int,
        rate: float | None,
        *,
        start_time: float | None = None,
        utc_start: bool = True,
        events: np.ndarray | None = None,
        spans: np.ndarray | None = None,
    ) -> None:
        self.name = spec
        self.files = list(files)
        self.size = sum(p.stat().st_size for p in self.files)
        self.n_rows = n_rows
        self.rate = rate
        self.start_time = start_time
        self.utc_start = utc_start  # False: a time of day without a date (WFDB)
        self._cols = pick_columns(spec, names, options.columns)
        self.channels = [str(names[i]) for i in self._cols]
        self.has_labels = options.label_from_annotations
        self._events = (
            np.zeros(0, dtype=np.int64) if events is None else np.asarray(events, dtype=np.int64)
        )
        self._spans = (
            np.zeros((0, 2), dtype=np.int64) if spans is None else np.asarray(spans, dtype=np.int64)
        )
        self._step = max(1, options.block_bytes // (4 * max(1, len(names))))

    def _read(self, a: int, b: int) -> np.ndarray:
        raise NotImplementedError

    def blocks(self) -> Iterator[ParsedBlock]:
        for a in range(0, self.n_rows, self._step):
            b = min(self.n_rows, a + self._step)
            values = np.asarray(self._read(a, b), dtype=np.float32).reshape(b - a, -1)[
                :, self._cols
            ]
            labels = span_labels(self._spans, a, b) if self.has_labels else None
            t0 = self.start_time if a == 0 else None
            self.rows += b - a
            yield ParsedBlock(
                values,
                None,
                labels,
                a,
                b"",
                0,
                self.name,
                "row",
                segment_t0=t0,
                utc=self.utc_start,
            )

    def events(self) -> np.ndarray:
        return np.zeros(0, dtype=np.int64) if self.has_labels else self._events

    def sha256(self) -> str:
        return files_sha256(self.files)

    def record(self) -> dict[str, Any]:
        out = super().record()
        if self.units is not None:
            out["units"] = dict(zip(self.channels, self.units, strict=True))
        return out


def require(library: str, extra: str, spec: str, what: str) -> ModuleType:
    """Import a format's library, or say which extra installs it."""
    try:
        return importlib.import_module(library)
    except ImportError:
        raise MissingExtraError(
            f"{spec}: reading {what} needs the {library} package; install it with "
            f"pip install 'chunkfit[{extra}]' (or chunkfit[formats] for every format)"
        ) from None
