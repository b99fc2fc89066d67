"""Naming the bad line of a CSV block that pyarrow refused: a slow pass over that block alone, line
by line and field by field, finds the first line, column and value that break the layout.
"""

from __future__ import annotations

from ..errors import SourceFormatError
from .csvfields import (
    NULL_TOKENS,
    decimal_comma,
    decode_line,
    is_number,
    is_timestamp,
    split_fields,
    unclosed_quote,
)
from .csvlayout import CsvLayout


def locate_error(
    block: bytes, first_line: int, layout: CsvLayout, header_lines: int, fallback: str
) -> SourceFormatError:
    """The error that names the first bad line of a block pyarrow refused (``fallback``, pyarrow's
    own message, when no line is found at fault)."""
    ncols = len(layout.names)
    for i, raw in enumerate(block.split(b"\n")[header_lines:]):
        where = f"{layout.name}:{first_line + header_lines + i}"
        text = decode_line(raw, where)
        if not text.strip():
            continue
        fields = split_fields(text, layout.delimiter)
        if fields is None:
            return unclosed_quote(where, text, layout.delimiter)
        if len(fields) != ncols:
            return SourceFormatError(
                f"{where}: ragged row: expected {ncols} fields separated by "
                f"{layout.delimiter!r}, found {len(fields)}; fix or remove the line"
            )
        err = row_error(where, fields, layout)
        if err is not None:
            return err
    return SourceFormatError(f"{layout.name}:{first_line}: cannot parse this block: {fallback}")


def row_error(where: str, fields: list[str], layout: CsvLayout) -> SourceFormatError | None:
    """The error for the first field of a row that the layout's columns cannot read, if any."""
    for col in layout.needed:
        j = layout.column_number(col) - 1
        value = fields[j].strip().strip('"')
        at = f"{where}:{j + 1}"
        if col == layout.time and not layout.time_is_number:
            err = timestamp_error(at, value, col)
        elif col == layout.label:
            err = label_error(at, value, col)
        else:
            err = number_error(at, value, col, is_time=col == layout.time)
        if err is not None:
            return err
    return None


def timestamp_error(at: str, value: str, col: str) -> SourceFormatError | None:
    if is_timestamp(value):
        return None
    return SourceFormatError(
        f"{at}: {value[:40]!r} in time column {col!r} is not an ISO 8601 timestamp like the "
        "first row's; fix the value"
    )


def label_error(at: str, value: str, col: str) -> SourceFormatError | None:
    if value.lstrip("-").isdigit() or value in NULL_TOKENS:
        return None
    return SourceFormatError(f"{at}: label {value!r} in column {col!r} is not an integer class")


def number_error(at: str, value: str, col: str, *, is_time: bool) -> SourceFormatError | None:
    if not value or is_number(value):
        return None
    comma = decimal_comma(at, value, col)
    if comma is not None:
        return comma
    kind = "time column" if is_time else "column"
    fix = "fix the value" if is_time else "fix the value or leave the column out with --columns"
    return SourceFormatError(f"{at}: {value[:40]!r} in {kind} {col!r} is not a number; {fix}")
