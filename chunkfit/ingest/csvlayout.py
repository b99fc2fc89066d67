"""The layout of a CSV/TSV source, decided from its first line(s): delimiter, header, column names,
and which columns are channels, time and labels. Each decision is a small pure function; the
options name columns by header name or 0-based position.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import IngestOptions
from ..errors import SourceFormatError, UsageError
from .csvfields import (
    DELIMITERS,
    decimal_comma,
    has_tz,
    is_number,
    is_timestamp,
    split_fields,
    unclosed_quote,
    unquote,
)


class CsvLayout:
    """Column roles decided from the first line(s): delimiter, header, channels, time and labels."""

    def __init__(self, name: str, first: str, second: str | None, options: IngestOptions) -> None:
        self.name = name
        self.delimiter = options.delimiter or sniff_delimiter(first, name)
        fields = line_fields(f"{name}:1", first, self.delimiter)
        self.header = has_header(fields, options)
        self.names = column_names(name, fields, self.header, options)
        sample_line = second if self.header else first  # the first data row, when there is one
        sample_at = f"{name}:{2 if self.header else 1}"
        sample = line_fields(sample_at, sample_line, self.delimiter) if sample_line else []
        self.time = self._resolve(options.time_column, "--time-column")
        self.label = self._resolve(options.label_column, "--label-column")
        if self.time is not None and self.time == self.label:
            raise UsageError(
                f"{name}:1: --time-column and --label-column both name column {self.time!r}; "
                "give two columns"
            )
        if options.columns is not None:
            self.channels = [self._resolve_named(c, "--columns") for c in options.columns]
            refuse_chosen_channels(name, self.channels, self.label)
        else:
            self.channels = numeric_columns(self.names, sample, {self.time, self.label}, sample_at)
        refuse_channels(name, self.names, self.channels, self.delimiter, first)
        self.time_is_number, self.time_tz = time_kind(sample_at, self.names, self.time, sample)
        self.time_origin_ns: int | None = None  # first ISO timestamp: later ones are relative to it

    def _resolve(self, column: str | None, flag: str) -> str | None:
        return None if column is None else self._resolve_named(column, flag)

    def _resolve_named(self, column: str, flag: str) -> str:
        return resolve_column(self.name, self.names, column, flag)

    def column_number(self, name: str) -> int:
        """1-based position of a column in the file, for messages."""
        return self.names.index(name) + 1

    @property
    def needed(self) -> list[str]:
        """The columns a parse reads: the channels, then the time and label columns."""
        cols = list(self.channels)
        for extra in (self.time, self.label):
            if extra is not None and extra not in cols:
                cols.append(extra)
        return cols


def sniff_delimiter(line: str, name: str) -> str:
    """Tab for a .tsv/.tab file, else the delimiter the first line holds most of (comma if none)."""
    if name.lower().endswith((".tsv", ".tsv.gz", ".tab")):
        return "\t"
    counts = {d: line.count(d) for d in DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def line_fields(where: str, line: str, delimiter: str) -> list[str]:
    """The unquoted fields of one line, or the error for a quote that never closes."""
    split = split_fields(line, delimiter)
    if split is None:
        raise unclosed_quote(where, line, delimiter)
    return [unquote(f) for f in split]


def has_header(fields: Sequence[str], options: IngestOptions) -> bool:
    """Whether the first line is a header: as ``--header`` says, else when a field is no number
    or the line holds the name ``--time-column`` gives."""
    if options.header is not None:
        return options.header
    return not all(is_number(f) for f in fields if f) or (
        options.time_column is not None and options.time_column in fields
    )


def column_names(
    name: str, fields: Sequence[str], header: bool, options: IngestOptions
) -> list[str]:
    """The header's names, else ``--names``, else ch0, ch1, ...; names must differ."""
    names = list(fields) if header else [f"ch{i}" for i in range(len(fields))]
    if options.names is not None:
        if header:
            raise UsageError(
                f"{name}:1: --names names the columns of a CSV without a header line, and this "
                "one has a header; drop --names (or pass --no-header if line 1 is data)"
            )
        if len(options.names) != len(fields):
            raise UsageError(
                f"{name}:1: --names gives {len(options.names)} name(s) for {len(fields)} column(s)"
            )
        names = list(options.names)
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise SourceFormatError(f"{name}:1: duplicate column name(s) {', '.join(dup)}; rename them")
    return names


def resolve_column(name: str, names: Sequence[str], column: str, flag: str) -> str:
    """The column an option names, by header name or 0-based position."""
    if column in names:
        return column
    if column.isdigit() and int(column) < len(names):
        return names[int(column)]
    raise UsageError(
        f"{name}:1: {flag} {column!r} is not a column (columns: {', '.join(names)}); "
        "name a column of the header or give a 0-based position"
    )


def refuse_chosen_channels(name: str, channels: Sequence[str], label: str | None) -> None:
    """``--columns`` names each channel once and leaves the label column out."""
    twice = sorted({c for c in channels if channels.count(c) > 1})
    if twice:
        raise UsageError(
            f"{name}:1: --columns names column {twice[0]!r} twice; name each channel once"
        )
    if label is not None and label in channels:
        raise UsageError(
            f"{name}:1: --columns includes the label column {label!r}: the model would see the "
            "answer; leave it out of --columns"
        )


def numeric_columns(
    names: Sequence[str], sample: Sequence[str], skip: set[str | None], sample_at: str
) -> list[str]:
    """The channels when ``--columns`` is not given: every column but time and label whose first
    data row holds a number (or nothing); a number with a decimal comma is refused."""
    channels = [
        n
        for i, n in enumerate(names)
        if n not in skip
        and (not sample or i >= len(sample) or is_number(sample[i]) or sample[i] == "")
    ]
    for i, n in enumerate(names):
        if n not in skip and i < len(sample):
            err = decimal_comma(f"{sample_at}:{i + 1}", sample[i], n)
            if err is not None:
                raise err
    return channels


def refuse_channels(
    name: str, names: Sequence[str], channels: Sequence[str], delimiter: str, first: str
) -> None:
    """There is at least one channel, and each has a name."""
    if not channels:
        other = [d for d in (*DELIMITERS, " ") if d != delimiter and d in first.strip()]
        hint = (
            f", or pass --delimiter {other[0]!r} (the first line holds {other[0]!r})"
            if other
            else ""
        )
        raise SourceFormatError(
            f"{name}: no numeric channel column found (columns: {', '.join(names)}); "
            f"choose them with --columns{hint}"
        )
    if "" in channels:
        col = list(names).index("") + 1
        raise SourceFormatError(
            f"{name}:1:{col}: column {col} has no name in the header; name it, or choose the "
            "channels with --columns"
        )


def time_kind(
    sample_at: str, names: Sequence[str], time: str | None, sample: Sequence[str]
) -> tuple[bool, bool]:
    """(seconds?, zoned?) of the time column, read from the first data row: seconds, or an ISO 8601
    timestamp with or without a time zone; anything else is refused."""
    if time is None or not sample:
        return True, False
    j = list(names).index(time)
    value = sample[j] if j < len(sample) else ""
    if is_number(value):
        return True, False
    if not is_timestamp(value):
        raise SourceFormatError(
            f"{sample_at}:{j + 1}: {value[:40]!r} in time column {time!r} is neither seconds nor "
            "an ISO 8601 timestamp; fix the value, or pass --rate instead of --time-column"
        )
    return False, has_tz(value)
