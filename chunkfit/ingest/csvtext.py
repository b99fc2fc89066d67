"""CSV/TSV parsing: pyarrow parses each block of lines at full speed; when it refuses a block, a
slow pass over that block alone finds the exact line and column to name in the error.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import os
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..config import IngestOptions
from ..errors import SourceFormatError, UsageError
from .background import background
from .textblocks import LineBlocks

DELIMITERS = (",", "\t", ";", "|")
DECIMAL_COMMA = re.compile(r"[-+]?[0-9]+,[0-9]+")
LABEL_MIN, LABEL_MAX = -(2**31), 2**31 - 1
PARSERS = min(4, os.cpu_count() or 1)  # blocks parsed at once, one thread each


@dataclasses.dataclass
class ParsedBlock:
    """Rows of one block: channel values, optional times (seconds) and labels, and line numbers."""

    values: np.ndarray  # float32 [rows, channels]; float64 text is rounded once, here
    times: np.ndarray | None
    labels: np.ndarray | None
    first_line: int
    raw: bytes
    header_lines: int = 0
    name: str = ""
    unit: str = "line"
    columns: list[int] | None = None  # 1-based file column of each channel (text sources)
    time_column: int | None = None  # 1-based file column of the time (text sources)
    time_origin: float = 0.0  # absolute seconds of ``times == 0`` (ISO times are kept relative)
    delimiter: str = ","
    # Recording formats: this block starts a new segment recorded from this absolute time (s).
    segment_t0: float | None = None

    def text_of(self, row: int, channel: int) -> str | None:
        """The source's own text of one value (text sources only), for messages."""
        if self.columns is None:
            return None
        line = self.raw.split(b"\n")[self.line_of(row) - self.first_line]
        fields = split_fields(line.decode("utf-8", "replace").rstrip("\r"), self.delimiter) or []
        col = self.columns[channel] - 1
        return fields[col].strip().strip('"').strip() if col < len(fields) else None

    def where(self, row: int, channel: int | None = None) -> str:
        """Where data row ``row`` (and ``channel``) of this block sits in its source, for messages."""
        if self.unit == "row":
            at = f"{self.name}: row {self.first_line + row} (counted from 0)"
            return at if channel is None else f"{at}, column {channel} (counted from 0)"
        at = f"{self.name}:{self.line_of(row)}"
        if channel is not None and self.columns is not None:
            at += f":{self.columns[channel]}"
        return at

    def line_of(self, row: int) -> int:
        """File line number of data row ``row`` of this block (blank lines skipped by the parser)."""
        lines = self.raw.split(b"\n")
        seen = -1
        for i, line in enumerate(lines[self.header_lines :]):
            if line.strip(b"\r"):
                seen += 1
                if seen == row:
                    return self.first_line + self.header_lines + i
        return self.first_line + row


# Tokens pyarrow reads as a missing value in a numeric column (its default ``null_values``).
NULL_TOKENS = frozenset(
    [
        "",
        "#N/A",
        "#N/A N/A",
        "#NA",
        "-1.#IND",
        "-1.#QNAN",
        "-NaN",
        "-nan",
        "1.#IND",
        "1.#QNAN",
        "N/A",
        "NA",
        "NULL",
        "NaN",
        "n/a",
        "nan",
        "null",
    ]
)


def _is_number(text: str) -> bool:
    """Whether pyarrow reads ``text`` as a float (a missing-value token counts as one)."""
    text = text.strip().strip('"').strip()
    if text in NULL_TOKENS:
        return True
    if "_" in text:  # Python's float() accepts 1_000; pyarrow does not
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_timestamp(text: str) -> bool:
    import pyarrow as pa

    try:
        pa.array([text.strip().strip('"')]).cast(
            pa.timestamp("ns", tz="UTC" if _has_tz(text) else None)
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _has_tz(value: str) -> bool:
    value = value.strip().strip('"')
    return value.endswith("Z") or "+" in value[10:] or value[19:].count("-") > 0


def _field(text: str) -> str:
    return text.strip().strip('"').strip()


def split_fields(line: str, delimiter: str) -> list[str] | None:
    """The fields of one line with double quotes honoured as pyarrow does; None if a quote never closes."""
    try:
        return next(csv.reader([line], delimiter=delimiter, strict=True), [])
    except csv.Error:
        return None


def _open_quote_column(line: str, delimiter: str) -> int:
    """1-based column of the field whose opening quote is never closed."""
    column, quoted, opened = 1, False, 1
    for ch in line:
        if ch == '"':
            quoted = not quoted
            opened = column
        elif ch == delimiter and not quoted:
            column += 1
    return opened


def _unclosed_quote(where: str, line: str, delimiter: str) -> SourceFormatError:
    return SourceFormatError(
        f"{where}:{_open_quote_column(line, delimiter)}: a double quote opened here is never closed; "
        "close it or remove it"
    )


def _decimal_comma(where: str, value: str, column: str) -> SourceFormatError | None:
    """The error for a number written with a decimal comma (1,5), if ``value`` is one."""
    if not DECIMAL_COMMA.fullmatch(value.strip()):
        return None
    return SourceFormatError(
        f"{where}: {value.strip()!r} in column {column!r} uses a decimal comma; chunkfit reads '.' as the "
        "decimal point: convert the numbers (e.g. 1,5 -> 1.5)"
    )


def _decode(line: bytes, where: str) -> str:
    if b"\x00" in line:
        raise SourceFormatError(
            f"{where}: binary data or UTF-16 text, not a CSV log; save it as UTF-8 text"
        )
    try:
        return line.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise SourceFormatError(
            f"{where}: not UTF-8 text (byte {err.start + 1} of the line); re-save the file as UTF-8"
        ) from None


def _sniff_delimiter(line: str, name: str) -> str:
    if name.lower().endswith((".tsv", ".tsv.gz", ".tab")):
        return "\t"
    counts = {d: line.count(d) for d in DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


class CsvLayout:
    """Column roles decided from the first line(s): delimiter, header, channels, time and labels."""

    def __init__(self, name: str, first: str, second: str | None, options: IngestOptions) -> None:
        self.name = name
        self.delimiter = options.delimiter or _sniff_delimiter(first, name)
        split = split_fields(first, self.delimiter)
        if split is None:
            raise _unclosed_quote(f"{name}:1", first, self.delimiter)
        fields = [_field(f) for f in split]
        header = options.header
        if header is None:
            header = not all(_is_number(f) for f in fields if f) or (
                options.time_column is not None and options.time_column in fields
            )
        self.header = header
        self.names = fields if header else [f"ch{i}" for i in range(len(fields))]
        if options.names is not None:
            if header:
                raise UsageError(
                    f"{name}:1: --names names the columns of a CSV without a header line, and this one has a "
                    "header; drop --names (or pass --no-header if line 1 is data)"
                )
            if len(options.names) != len(fields):
                raise UsageError(
                    f"{name}:1: --names gives {len(options.names)} name(s) for {len(fields)} column(s)"
                )
            self.names = list(options.names)
        if len(set(self.names)) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise SourceFormatError(
                f"{name}:1: duplicate column name(s) {', '.join(dup)}; rename them"
            )
        sample_line = second if header else first  # the first data row, when there is one
        sample_at = f"{name}:{2 if header else 1}"
        sample_split = split_fields(sample_line, self.delimiter) if sample_line else []
        if sample_split is None:
            raise _unclosed_quote(sample_at, str(sample_line), self.delimiter)
        sample = [_field(f) for f in sample_split]
        self.time = self._resolve(options.time_column, "--time-column")
        self.label = self._resolve(options.label_column, "--label-column")
        if self.time is not None and self.time == self.label:
            raise UsageError(
                f"{name}:1: --time-column and --label-column both name column {self.time!r}; give two columns"
            )
        if options.columns is not None:
            self.channels = [self._resolve(c, "--columns") for c in options.columns]
            twice = sorted({c for c in self.channels if self.channels.count(c) > 1})
            if twice:
                raise UsageError(
                    f"{name}:1: --columns names column {twice[0]!r} twice; name each channel once"
                )
            if self.label is not None and self.label in self.channels:
                raise UsageError(
                    f"{name}:1: --columns includes the label column {self.label!r}: the model would see the answer; "
                    "leave it out of --columns"
                )
        else:
            skip = {self.time, self.label}
            self.channels = [
                n
                for i, n in enumerate(self.names)
                if n not in skip
                and (not sample or i >= len(sample) or _is_number(sample[i]) or sample[i] == "")
            ]
            for i, n in enumerate(self.names):
                if n not in skip and i < len(sample):
                    err = _decimal_comma(f"{sample_at}:{i + 1}", sample[i], n)
                    if err is not None:
                        raise err
        if not self.channels:
            other = [d for d in (*DELIMITERS, " ") if d != self.delimiter and d in first.strip()]
            hint = (
                f", or pass --delimiter {other[0]!r} (the first line holds {other[0]!r})"
                if other
                else ""
            )
            raise SourceFormatError(
                f"{name}: no numeric channel column found (columns: {', '.join(self.names)}); "
                f"choose them with --columns{hint}"
            )
        for n in self.channels:
            if n == "":
                col = self.names.index(n) + 1
                raise SourceFormatError(
                    f"{name}:1:{col}: column {col} has no name in the header; name it, or choose the channels "
                    "with --columns"
                )
        self.time_is_number = True
        self.time_tz = False
        self.time_origin_ns: int | None = None  # first ISO timestamp: later ones are relative to it
        if self.time is not None and sample:
            j = self.names.index(self.time)
            value = sample[j] if j < len(sample) else ""
            self.time_is_number = _is_number(value)
            if not self.time_is_number and not _is_timestamp(value):
                raise SourceFormatError(
                    f"{sample_at}:{j + 1}: {value[:40]!r} in time column {self.time!r} is neither seconds nor an "
                    "ISO 8601 timestamp; fix the value, or pass --rate instead of --time-column"
                )
            self.time_tz = not self.time_is_number and _has_tz(value)

    def _resolve(self, column: str | None, flag: str) -> Any:
        if column is None:
            return None
        if column in self.names:
            return column
        if column.isdigit() and int(column) < len(self.names):
            return self.names[int(column)]
        raise UsageError(
            f"{self.name}:1: {flag} {column!r} is not a column (columns: {', '.join(self.names)}); "
            "name a column of the header or give a 0-based position"
        )

    def column_number(self, name: str) -> int:
        """1-based position of a column in the file, for messages."""
        return self.names.index(name) + 1

    @property
    def needed(self) -> list[str]:
        cols = list(self.channels)
        for extra in (self.time, self.label):
            if extra is not None and extra not in cols:
                cols.append(extra)
        return cols


def _locate(
    block: bytes, first_line: int, layout: CsvLayout, header_lines: int, fallback: str
) -> SourceFormatError:
    """Find the first bad line of a block that pyarrow refused and describe it."""
    lines = block.split(b"\n")
    ncols = len(layout.names)
    index = {n: i for i, n in enumerate(layout.names)}
    for i, raw in enumerate(lines[header_lines:]):
        line_no = first_line + header_lines + i
        where = f"{layout.name}:{line_no}"
        text = _decode(raw, where)
        if not text.strip():
            continue
        fields = split_fields(text, layout.delimiter)
        if fields is None:
            return _unclosed_quote(where, text, layout.delimiter)
        if len(fields) != ncols:
            return SourceFormatError(
                f"{where}: ragged row: expected {ncols} fields separated by {layout.delimiter!r}, "
                f"found {len(fields)}; fix or remove the line"
            )
        for col in layout.needed:
            j = index[col]
            value = fields[j].strip().strip('"')
            if col == layout.time and not layout.time_is_number:
                if not _is_timestamp(value):
                    return SourceFormatError(
                        f"{where}:{j + 1}: {value[:40]!r} in time column {col!r} is not an ISO 8601 "
                        "timestamp like the first row's; fix the value"
                    )
                continue
            if col == layout.label:
                if not value.lstrip("-").isdigit() and value not in NULL_TOKENS:
                    return SourceFormatError(
                        f"{where}:{j + 1}: label {value!r} in column {col!r} is not an integer class"
                    )
                continue
            if value and not _is_number(value):
                comma = _decimal_comma(f"{where}:{j + 1}", value, col)
                if comma is not None:
                    return comma
                kind = "time column" if col == layout.time else "column"
                fix = (
                    "fix the value"
                    if col == layout.time
                    else "fix the value or leave the column out with --columns"
                )
                return SourceFormatError(
                    f"{where}:{j + 1}: {value[:40]!r} in {kind} {col!r} is not a number; {fix}"
                )
    return SourceFormatError(f"{layout.name}:{first_line}: cannot parse this block: {fallback}")


def read_csv_block(body: bytes, read_opts: Any, parse_opts: Any, convert_opts: Any) -> Any:
    """pyarrow's table of one block of CSV text.

    A threaded parse (``read_opts.use_threads``) is handed a copy of the block in Arrow's own memory:
    given the ``bytes`` themselves, it can still hold them in one of its threads after returning
    (measured: 1,339 of 3,000 parses on an idle machine, 2-8% under load), and that thread then
    takes the GIL to let go of them. At interpreter exit, a thread taking the GIL is stopped midway,
    which aborts the process from inside Arrow ("terminate called without an active exception"); it
    happened to a live stream ended by Ctrl-C, the one path that parses blocks threaded right up to
    its exit.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if read_opts.use_threads:
        source = pa.allocate_buffer(len(body))
        np.frombuffer(source, dtype=np.uint8)[:] = np.frombuffer(body, dtype=np.uint8)
    else:
        source = pa.py_buffer(body)
    return pacsv.read_csv(
        source, read_options=read_opts, parse_options=parse_opts, convert_options=convert_opts
    )


def parse_blocks(
    lines: LineBlocks, name: str, options: IngestOptions
) -> tuple[CsvLayout, Iterator[ParsedBlock]]:
    """Decide the layout from the first block, then parse block after block."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    it = iter(lines) if lines.live else background(lines, depth=3)
    try:
        first_line, first_block = next(it)
    except StopIteration:
        raise SourceFormatError(f"{name}: empty source: no rows to ingest") from None
    nul = first_block.find(b"\x00", 0, 8192)
    if nul >= 0:  # checked before decoding: a binary file is seldom valid UTF-8 either
        line_no = first_line + first_block.count(b"\n", 0, nul)
        raise SourceFormatError(
            f"{name}:{line_no}: binary data or UTF-16 text, not a CSV log; save it as UTF-8 text"
        )
    if first_block.startswith(b"\xef\xbb\xbf"):
        first_block = first_block[3:]  # a UTF-8 byte order mark, as some spreadsheet exports write
    head = first_block.split(b"\n", 2)
    first = _decode(head[0], f"{name}:1")
    second = _decode(head[1], f"{name}:2") if len(head) > 1 and head[1].strip() else None
    if not first_block.strip():
        raise SourceFormatError(f"{name}: empty source: only blank lines, no rows to ingest")
    if not first.strip():
        raise SourceFormatError(
            f"{name}:1: the first line is empty; the header or first row must come first"
        )
    layout = CsvLayout(name, first, second, options)

    types: dict[str, Any] = {c: pa.float64() for c in layout.channels}
    if layout.label is not None:
        types[layout.label] = pa.int64()
    if layout.time is not None:
        types[layout.time] = (
            pa.float64()
            if layout.time_is_number
            else pa.timestamp("ns", tz="UTC" if layout.time_tz else None)
        )
    threaded_opts = pacsv.ReadOptions(
        column_names=layout.names, use_threads=True, block_size=1 << 22
    )
    single_opts = pacsv.ReadOptions(column_names=layout.names, use_threads=False)
    parse_opts = pacsv.ParseOptions(delimiter=layout.delimiter)
    convert_opts = pacsv.ConvertOptions(include_columns=layout.needed, column_types=types)
    columns = [layout.column_number(c) for c in layout.channels]
    time_col = layout.column_number(layout.time) if layout.time is not None else None

    def jobs() -> Iterator[tuple[bytes, bytes, int, int]]:
        """(body, block, first line, header lines) of every block that holds rows."""
        header_lines = 1 if layout.header else 0
        for start, block in itertools.chain([(first_line, first_block)], it):
            body = block
            if header_lines:
                body = block.split(b"\n", 1)[1] if b"\n" in block else b""
            if body and not body.isspace():
                yield body, block, start, header_lines
            header_lines = 0

    def gen() -> Iterator[ParsedBlock]:
        work = jobs()
        first = next(work, None)
        if first is None:
            return
        yield _parse_one(*first, threaded_opts)  # alone: it fixes the origin of ISO timestamps
        if lines.live:  # a live stream yields each block as soon as it is parsed
            for job in work:
                yield _parse_one(*job, threaded_opts)
            return
        # Whole blocks parse side by side, one thread each, and are yielded in order: pyarrow's own
        # threads split a block and spend ~35% more CPU doing so (measured on 8 MB blocks).
        pool = ThreadPoolExecutor(PARSERS, thread_name_prefix="chunkfit-parse")
        ahead: deque[Future[ParsedBlock]] = deque()
        try:
            for job in work:
                ahead.append(pool.submit(_parse_one, *job, single_opts))
                if len(ahead) > PARSERS:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _parse_one(
        body: bytes, block: bytes, start: int, header_lines: int, read_opts: Any
    ) -> ParsedBlock:
        nul = body.find(b"\x00")
        if nul >= 0:
            line_no = start + header_lines + body.count(b"\n", 0, nul)
            raise SourceFormatError(
                f"{name}:{line_no}: binary data or UTF-16 text, not a CSV log; save it as UTF-8 text"
            )
        try:
            table = read_csv_block(body, read_opts, parse_opts, convert_opts)
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError) as err:
            raise _locate(block, start, layout, header_lines, str(err).splitlines()[0]) from None
        values = np.empty((table.num_rows, len(layout.channels)), dtype=np.float32)
        for j, c in enumerate(layout.channels):
            with np.errstate(over="ignore"):  # beyond float32 becomes Inf, refused by --nan
                _copy_column(table.column(c), values[:, j])
        times = None
        if layout.time is not None:
            col = table.column(layout.time)
            if col.null_count:
                row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                pb = ParsedBlock(values, None, None, start, block, header_lines)
                raise SourceFormatError(
                    f"{name}:{pb.line_of(row)}:{time_col}: time column {layout.time!r} is empty; "
                    "every row needs a time"
                )
            if layout.time_is_number:
                times = _column(col, np.float64)
            else:
                # Epoch seconds as float64 are only good to ~0.2 us; offsets from the first
                # timestamp keep the steps (and so the derived rate) exact.
                ns = _column(col, np.int64)
                if layout.time_origin_ns is None:
                    layout.time_origin_ns = int(ns[0])
                times = (ns - layout.time_origin_ns).astype(np.float64) / 1e9
        labels = None
        if layout.label is not None:
            col = table.column(layout.label)
            if col.null_count:
                row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                pb = ParsedBlock(values, None, None, start, block, header_lines)
                raise SourceFormatError(
                    f"{name}:{pb.line_of(row)}:{layout.column_number(layout.label)}: label column "
                    f"{layout.label!r} is empty; every row needs a class"
                )
            labels = _column(col, np.int64)
            outside = np.flatnonzero((labels < LABEL_MIN) | (labels > LABEL_MAX))
            if outside.size:
                row = int(outside[0])
                pb = ParsedBlock(values, None, None, start, block, header_lines)
                raise SourceFormatError(
                    f"{name}:{pb.line_of(row)}:{layout.column_number(layout.label)}: label "
                    f"{int(labels[row])} does not fit a 32-bit class number; renumber the classes"
                )
        origin = (layout.time_origin_ns or 0) / 1e9
        return ParsedBlock(
            values,
            times,
            labels,
            start,
            block,
            header_lines,
            name,
            "line",
            columns,
            time_col,
            origin,
            layout.delimiter,
        )

    return layout, gen()


def _copy_column(col: Any, out: np.ndarray) -> None:
    """Copy a numeric arrow column (float64, int64 or timestamp) into ``out``; nulls become NaN.

    Reads the arrow buffers directly, chunk by chunk: ``to_numpy`` imports pandas on first use
    (~0.25 s) and ``ChunkedArray.to_numpy`` concatenates first.
    """
    import pyarrow as pa

    at = 0
    for piece in col.chunks:
        n = len(piece)
        if n == 0:
            continue
        validity, data = piece.buffers()[:2]
        raw = np.frombuffer(
            data,
            dtype=np.float64 if pa.types.is_float64(piece.type) else np.int64,
            count=n + piece.offset,
        )
        out[at : at + n] = raw[piece.offset :]
        if piece.null_count:
            bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
            out[at : at + n][bits[piece.offset : piece.offset + n] == 0] = np.nan
        at += n


def _column(col: Any, dtype: type) -> np.ndarray:
    out = np.empty(len(col), dtype=dtype)
    _copy_column(col, out)
    return out


def describe_value(v: float) -> str:
    return "NaN" if math.isnan(v) else ("Inf" if v > 0 else "-Inf")
