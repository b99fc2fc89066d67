"""Parquet, read by pyarrow one row group at a time (batches of ``block_bytes``), never whole.

Columns work as they do for CSV: every numeric column but the time and label columns is a channel
(``--columns`` picks by name or 0-based position, ``--names`` renames); ``--time-column`` (numeric
seconds or a timestamp type) derives the rate and splits segments at gaps; ``--label-column`` (an
integer type) gives per-sample classes. Nulls are missing values, handled by ``--nan``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...config import IngestOptions
from ...errors import SourceFormatError, UsageError
from ..block import LABEL_MAX, LABEL_MIN, ParsedBlock
from ..source import Source
from .base import files_sha256

FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclasses.dataclass
class ParquetBlock(ParsedBlock):
    """Rows of one batch; places in messages are row numbers of the file and column names."""

    column_names: list[str] = dataclasses.field(default_factory=list)
    nulls: np.ndarray | None = None  # bool [rows, channels]: the value was null

    def where(self, row: int, channel: int | None = None) -> str:
        at = f"{self.name}: row {self.first_line + row} (counted from 0)"
        return at if channel is None else f"{at}, column {self.column_names[channel]!r}"

    def text_of(self, row: int, channel: int) -> str | None:
        # A null reads as an empty value in messages; any other value is not text.
        return "" if self.nulls is not None and self.nulls[row, channel] else None


def _reason(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _is_numeric(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _column(spec: str, names: list[str], c: str, flag: str) -> int:
    if c in names:
        return names.index(c)
    if c.isdigit() and int(c) < len(names):
        return int(c)
    raise UsageError(f"{spec}: {flag} {c!r} is not a column (columns: {', '.join(names)})")


def open_source(spec: str, path: Path, options: IngestOptions) -> ParquetSource:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if options.annotations is not None:
        raise UsageError(
            f"{spec}: --annotations applies to WFDB and EDF+ files; use --label-column or --events "
            "for Parquet"
        )
    try:
        pf = pq.ParquetFile(str(path))
        schema = pf.schema_arrow
    except (pa.ArrowException, OSError) as err:
        raise SourceFormatError(
            f"{spec}: not a readable Parquet file ({_reason(err)}); copy it again"
        ) from None
    return ParquetSource(spec, path, options, pf, schema)


class ParquetSource(Source):
    format = "Parquet"

    def __init__(self, spec: str, path: Path, options: IngestOptions, pf: Any, schema: Any) -> None:
        import pyarrow as pa

        self.name = spec
        self.path = path
        self.size = path.stat().st_size
        self._pf = pf
        self._rate = options.rate
        names = list(schema.names)
        types = [schema.field(i).type for i in range(len(names))]
        self._time = (
            None
            if options.time_column is None
            else _column(spec, names, options.time_column, "--time-column")
        )
        self._label = (
            None
            if options.label_column is None
            else _column(spec, names, options.label_column, "--label-column")
        )
        if self._time is not None:
            t = types[self._time]
            if not (_is_numeric(t) or pa.types.is_timestamp(t)):
                raise UsageError(
                    f"{spec}: --time-column {names[self._time]!r} has type {t}; give a column of "
                    "seconds or timestamps"
                )
        if self._label is not None and not pa.types.is_integer(types[self._label]):
            raise UsageError(
                f"{spec}: --label-column {names[self._label]!r} has type {types[self._label]}; "
                "labels must be integer classes"
            )
        taken = {self._time, self._label}
        if options.columns is not None:
            cols = [_column(spec, names, c, "--columns") for c in options.columns]
            for i in cols:
                if cols.count(i) > 1:
                    raise UsageError(
                        f"{spec}: --columns names column {names[i]!r} twice; name each column once"
                    )
                if i in taken:
                    raise UsageError(
                        f"{spec}: --columns names {names[i]!r}, the time or label column"
                    )
                if not _is_numeric(types[i]):
                    raise UsageError(
                        f"{spec}: --columns {names[i]!r} has type {types[i]}; channels must be "
                        "numeric columns"
                    )
        else:
            cols = [i for i, t in enumerate(types) if i not in taken and _is_numeric(t)]
        if not cols:
            raise SourceFormatError(
                f"{spec}: no numeric column to use as a channel (columns: {', '.join(names)})"
            )
        self._cols = cols
        self._names = names
        self.channels = [names[i] for i in cols]
        if options.names is not None:
            if len(options.names) != len(cols):
                raise UsageError(
                    f"{spec}: --names gives {len(options.names)} name(s) for {len(cols)} channel(s)"
                )
            self.channels = list(options.names)
        self.has_time = self._time is not None
        self.has_labels = self._label is not None
        self._time_is_stamp = self._time is not None and pa.types.is_timestamp(types[self._time])
        self._origin: int | None = None  # first timestamp, in the column's unit
        row_bytes = 8 * (len(cols) + 2)
        self._batch = max(1, options.block_bytes // row_bytes)
        if pf.metadata.num_rows == 0:
            raise SourceFormatError(f"{spec}: empty source: the Parquet file has no rows")

    def blocks(self) -> Iterator[ParsedBlock]:
        import pyarrow as pa

        wanted = sorted({*self._cols, *(c for c in (self._time, self._label) if c is not None)})
        by_name = [self._names[i] for i in wanted]
        row = 0
        for group in range(self._pf.num_row_groups):
            batches = self._pf.iter_batches(
                batch_size=self._batch, row_groups=[group], columns=by_name, use_threads=False
            )
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except (pa.ArrowException, OSError) as err:
                    raise SourceFormatError(
                        f"{self.name}: damaged Parquet data in row group {group} (from row {row}): "
                        f"{_reason(err)}; copy the file again"
                    ) from None
                if batch.num_rows == 0:
                    continue
                cols = {name: batch.column(i) for i, name in enumerate(by_name)}
                yield self._block(cols, row)
                row += batch.num_rows
                self.rows = row

    def _block(self, cols: dict[str, Any], first: int) -> ParsedBlock:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(next(iter(cols.values())))
        values = np.empty((n, len(self._cols)), dtype=np.float32)
        nulls = np.zeros((n, len(self._cols)), dtype=bool)
        for j, i in enumerate(self._cols):
            col = cols[self._names[i]]
            nulls[:, j] = col.is_null().to_numpy(zero_copy_only=False)
            wide = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
            with np.errstate(over="ignore"):
                values[:, j] = wide
            over = np.isinf(values[:, j]) & np.isfinite(wide)
            if over.any():
                r = int(np.flatnonzero(over)[0])
                raise SourceFormatError(
                    f"{self.name}: row {first + r} (counted from 0), column {self._names[i]!r}: "
                    f"{float(wide[r]):g} is beyond float32 storage (largest magnitude "
                    f"{FLOAT32_MAX:.4g}); rescale the column"
                )
        block = ParquetBlock(
            values,
            None,
            None,
            first,
            b"",
            0,
            self.name,
            "row",
            column_names=[self._names[i] for i in self._cols],
            nulls=nulls,
        )
        if self._time is not None:
            col = cols[self._names[self._time]]
            if self._time_is_stamp:
                unit = col.type.unit
                per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
                ticks = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
                if self._origin is None:
                    self._origin = (
                        int(ticks[0]) if not col.is_null().to_numpy(zero_copy_only=False)[0] else 0
                    )
                block.times = (ticks.astype(np.float64) - self._origin) / per_second
                if col.null_count:
                    block.times[col.is_null().to_numpy(zero_copy_only=False)] = np.nan
                block.time_origin = self._origin / per_second
                block.utc = True
            else:
                block.times = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
        if self._label is not None:
            block.labels = self._labels(cols[self._names[self._label]], first)
        return block

    def _labels(self, col: Any, first: int) -> np.ndarray:
        name = self._names[self._label]  # type: ignore[index]
        if col.null_count:
            r = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise SourceFormatError(
                f"{self.name}: row {first + r} (counted from 0), column {name!r}: missing label; "
                "every row needs a class"
            )
        labels = col.to_numpy(zero_copy_only=False)
        bad = (labels < LABEL_MIN) | (labels > LABEL_MAX)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise SourceFormatError(
                f"{self.name}: row {first + r} (counted from 0), column {name!r}: label "
                f"{int(labels[r])} is outside the 32-bit integer range"
            )
        return labels.astype(np.int32)

    def sha256(self) -> str:
        return files_sha256([self.path])
