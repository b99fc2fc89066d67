"""CSV/TSV parsing: pyarrow parses each block of lines at full speed, several blocks side by side;
when it refuses a block, ``csvlocate`` finds the exact line and column to name in the error.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..config import IngestOptions
from ..errors import SourceFormatError
from .background import background
from .block import LABEL_MAX, LABEL_MIN, ParsedBlock
from .csvfields import decode_line
from .csvlayout import CsvLayout
from .csvlocate import locate_error
from .textblocks import LineBlocks

PARSERS = min(4, os.cpu_count() or 1)  # blocks parsed at once, one thread each

# (body, block, first line, header lines) of one block that holds rows: the body is the block
# without its header line, the block is kept whole for messages.
Job = tuple[bytes, bytes, int, int]


def parse_blocks(
    lines: LineBlocks, name: str, options: IngestOptions
) -> tuple[CsvLayout, Iterator[ParsedBlock]]:
    """Decide the layout from the first block, then parse block after block."""
    it = iter(lines) if lines.live else background(lines, depth=3)
    first_line, first_block, first, second = _open_text(it, name)
    layout = CsvLayout(name, first, second, options)
    parser = BlockParser(name, layout)
    jobs = _jobs(itertools.chain([(first_line, first_block)], it), layout.header)
    return layout, _parsed(jobs, parser, live=lines.live)


def _open_text(it: Iterator[tuple[int, bytes]], name: str) -> tuple[int, bytes, str, str | None]:
    """(first line number, first block, its first line, its second line if not blank): refuses an
    empty source, binary data and a blank first line."""
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
    first = decode_line(head[0], f"{name}:1")
    second = decode_line(head[1], f"{name}:2") if len(head) > 1 and head[1].strip() else None
    if not first_block.strip():
        raise SourceFormatError(f"{name}: empty source: only blank lines, no rows to ingest")
    if not first.strip():
        raise SourceFormatError(
            f"{name}:1: the first line is empty; the header or first row must come first"
        )
    return first_line, first_block, first, second


def _jobs(blocks: Iterator[tuple[int, bytes]], header: bool) -> Iterator[Job]:
    """The job of every block that holds rows; the first block's header line is not a row."""
    header_lines = 1 if header else 0
    for start, block in blocks:
        body = block
        if header_lines:
            body = block.split(b"\n", 1)[1] if b"\n" in block else b""
        if body and not body.isspace():
            yield body, block, start, header_lines
        header_lines = 0


def _parsed(jobs: Iterator[Job], parser: BlockParser, *, live: bool) -> Iterator[ParsedBlock]:
    """The parsed blocks in source order."""
    first = next(jobs, None)
    if first is None:
        return
    yield parser.parse(*first, threaded=True)  # alone: it fixes the origin of ISO timestamps
    if live:  # a live stream yields each block as soon as it is parsed
        for job in jobs:
            yield parser.parse(*job, threaded=True)
        return
    # Whole blocks parse side by side, one thread each, and are yielded in order: pyarrow's own
    # threads, splitting a block, spend more CPU on the same work.
    pool = ThreadPoolExecutor(PARSERS, thread_name_prefix="chunkfit-parse")
    ahead: deque[Future[ParsedBlock]] = deque()
    try:
        for job in jobs:
            ahead.append(pool.submit(parser.parse, *job, threaded=False))
            if len(ahead) > PARSERS:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class BlockParser:
    """Parses the blocks of one text source with its layout's column types."""

    def __init__(self, name: str, layout: CsvLayout) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        self.name = name
        self.layout = layout
        types: dict[str, Any] = {c: pa.float64() for c in layout.channels}
        if layout.label is not None:
            types[layout.label] = pa.int64()
        if layout.time is not None:
            types[layout.time] = (
                pa.float64()
                if layout.time_is_number
                else pa.timestamp("ns", tz="UTC" if layout.time_tz else None)
            )
        self.threaded_opts = pacsv.ReadOptions(
            column_names=layout.names, use_threads=True, block_size=1 << 22
        )
        self.single_opts = pacsv.ReadOptions(column_names=layout.names, use_threads=False)
        self.parse_opts = pacsv.ParseOptions(delimiter=layout.delimiter)
        self.convert_opts = pacsv.ConvertOptions(include_columns=layout.needed, column_types=types)
        self.columns = [layout.column_number(c) for c in layout.channels]
        self.time_col = layout.column_number(layout.time) if layout.time is not None else None

    def parse(
        self, body: bytes, block: bytes, start: int, header_lines: int, *, threaded: bool
    ) -> ParsedBlock:
        """The rows of one block; a block pyarrow refuses raises the error naming its bad line."""
        import pyarrow as pa

        layout = self.layout
        nul = body.find(b"\x00")
        if nul >= 0:
            line_no = start + header_lines + body.count(b"\n", 0, nul)
            raise SourceFormatError(
                f"{self.name}:{line_no}: binary data or UTF-16 text, not a CSV log; "
                "save it as UTF-8 text"
            )
        read_opts = self.threaded_opts if threaded else self.single_opts
        try:
            table = read_csv_block(body, read_opts, self.parse_opts, self.convert_opts)
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError) as err:
            first = str(err).splitlines()[0]
            raise locate_error(block, start, layout, header_lines, first) from None
        values = np.empty((table.num_rows, len(layout.channels)), dtype=np.float32)
        for j, c in enumerate(layout.channels):
            with np.errstate(over="ignore"):  # beyond float32 becomes Inf, refused by --nan
                copy_column(table.column(c), values[:, j])
        at = ParsedBlock(values, None, None, start, block, header_lines)  # for messages
        times = self._times(table, at)
        labels = self._labels(table, at)
        return ParsedBlock(
            values,
            times,
            labels,
            start,
            block,
            header_lines,
            self.name,
            "line",
            self.columns,
            self.time_col,
            (layout.time_origin_ns or 0) / 1e9,
            layout.delimiter,
            utc=layout.time is not None and not layout.time_is_number,
        )

    def _times(self, table: Any, at: ParsedBlock) -> np.ndarray | None:
        """The time column in seconds: as written, or an ISO timestamp's offset from the first."""
        layout = self.layout
        if layout.time is None:
            return None
        col = table.column(layout.time)
        if col.null_count:
            row = _first_null(col)
            raise SourceFormatError(
                f"{self.name}:{at.line_of(row)}:{self.time_col}: time column {layout.time!r} is "
                "empty; every row needs a time"
            )
        if layout.time_is_number:
            return column_array(col, np.float64)
        # Epoch seconds as float64 are only good to ~0.2 us; offsets from the first timestamp
        # keep the steps (and so the derived rate) exact.
        ns = column_array(col, np.int64)
        if layout.time_origin_ns is None:
            layout.time_origin_ns = int(ns[0])
        return (ns - layout.time_origin_ns).astype(np.float64) / 1e9

    def _labels(self, table: Any, at: ParsedBlock) -> np.ndarray | None:
        """The label column: an integer class on every row, each fitting 32 bits."""
        label = self.layout.label
        if label is None:
            return None
        col = table.column(label)
        column = self.layout.column_number(label)
        if col.null_count:
            line = at.line_of(_first_null(col))
            raise SourceFormatError(
                f"{self.name}:{line}:{column}: label column {label!r} is empty; every row needs a "
                "class"
            )
        labels = column_array(col, np.int64)
        outside = np.flatnonzero((labels < LABEL_MIN) | (labels > LABEL_MAX))
        if outside.size:
            row = int(outside[0])
            raise SourceFormatError(
                f"{self.name}:{at.line_of(row)}:{column}: label {int(labels[row])} does not fit a "
                "32-bit class number; renumber the classes"
            )
        return labels


def read_csv_block(body: bytes, read_opts: Any, parse_opts: Any, convert_opts: Any) -> Any:
    """pyarrow's table of one block of CSV text.

    A threaded parse (``read_opts.use_threads``) is handed a copy of the block in Arrow's own
    memory: given the ``bytes`` themselves, it can still hold them in one of its threads after
    returning, and that thread then takes the GIL to let go of them. At interpreter exit, a thread
    taking the GIL is stopped midway, which aborts the process from inside Arrow ("terminate called
    without an active exception"); a live stream ended by Ctrl-C, the one path that parses blocks
    threaded right up to its exit, would hit it.

    A parse that Ctrl-C cancelled is run again (see below).
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if read_opts.use_threads:
        source = pa.allocate_buffer(len(body))
        np.frombuffer(source, dtype=np.uint8)[:] = np.frombuffer(body, dtype=np.uint8)
    else:
        source = pa.py_buffer(body)
    options = {
        "read_options": read_opts,
        "parse_options": parse_opts,
        "convert_options": convert_opts,
    }
    try:
        return pacsv.read_csv(source, **options)
    except pa.ArrowCancelled:
        # In the main thread pyarrow cancels a parse on Ctrl-C and hands the signal on to Python's
        # handler. A live stream ends at its first Ctrl-C keeping the rows that arrived, so the
        # block is parsed again; elsewhere the handler has raised KeyboardInterrupt already.
        return pacsv.read_csv(source, **options)


def _first_null(col: Any) -> int:
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def copy_column(col: Any, out: np.ndarray) -> None:
    """Copy a numeric arrow column (float64, int64 or timestamp) into ``out``; nulls become NaN.

    Reads the arrow buffers directly, chunk by chunk: ``to_numpy`` imports pandas on first use and
    ``ChunkedArray.to_numpy`` concatenates first.
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


def column_array(col: Any, dtype: type) -> np.ndarray:
    """A numeric arrow column as a new array of ``dtype``; nulls become NaN."""
    out: np.ndarray = np.empty(len(col), dtype=dtype)
    copy_column(col, out)
    return out
