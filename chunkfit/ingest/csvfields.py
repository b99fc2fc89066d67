"""The rules for one CSV line and one field, as pyarrow applies them: splitting with quotes, what
reads as a number, a timestamp or a missing value, and the messages for text that breaks them.
"""

from __future__ import annotations

import csv
import re

from ..errors import SourceFormatError

DELIMITERS = (",", "\t", ";", "|")
DECIMAL_COMMA = re.compile(r"[-+]?[0-9]+,[0-9]+")

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


def unquote(text: str) -> str:
    """A field without its surrounding blanks and double quotes."""
    return text.strip().strip('"').strip()


def is_number(text: str) -> bool:
    """Whether pyarrow reads ``text`` as a float (a missing-value token counts as one)."""
    text = unquote(text)
    if text in NULL_TOKENS:
        return True
    if "_" in text:  # Python's float() accepts 1_000; pyarrow does not
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def is_timestamp(text: str) -> bool:
    """Whether pyarrow reads ``text`` as an ISO 8601 timestamp."""
    import pyarrow as pa

    try:
        pa.array([text.strip().strip('"')]).cast(
            pa.timestamp("ns", tz="UTC" if has_tz(text) else None)
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def has_tz(value: str) -> bool:
    """Whether an ISO 8601 timestamp names its time zone (``Z`` or an offset)."""
    value = value.strip().strip('"')
    return value.endswith("Z") or "+" in value[10:] or value[19:].count("-") > 0


def split_fields(line: str, delimiter: str) -> list[str] | None:
    """The fields of one line with double quotes honoured as pyarrow does; None if a quote never
    closes."""
    try:
        return next(csv.reader([line], delimiter=delimiter, strict=True), [])
    except csv.Error:
        return None


def open_quote_column(line: str, delimiter: str) -> int:
    """1-based column of the field whose opening quote is never closed."""
    column, quoted, opened = 1, False, 1
    for ch in line:
        if ch == '"':
            quoted = not quoted
            opened = column
        elif ch == delimiter and not quoted:
            column += 1
    return opened


def unclosed_quote(where: str, line: str, delimiter: str) -> SourceFormatError:
    """The error for a line whose double quote never closes."""
    return SourceFormatError(
        f"{where}:{open_quote_column(line, delimiter)}: a double quote opened here is never "
        "closed; close it or remove it"
    )


def decimal_comma(where: str, value: str, column: str) -> SourceFormatError | None:
    """The error for a number written with a decimal comma (1,5), if ``value`` is one."""
    if not DECIMAL_COMMA.fullmatch(value.strip()):
        return None
    return SourceFormatError(
        f"{where}: {value.strip()!r} in column {column!r} uses a decimal comma; chunkfit reads '.' "
        "as the decimal point: convert the numbers (e.g. 1,5 -> 1.5)"
    )


def decode_line(line: bytes, where: str) -> str:
    """One line of a text source as text, or the error that says why it is not UTF-8 text."""
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
