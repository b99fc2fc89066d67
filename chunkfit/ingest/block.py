"""``ParsedBlock``: the rows every source yields (values, optional times and labels), and where each
row sits in its source, so that any later check can name the file, line and column of a bad value.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .csvfields import split_fields

# Labels are stored as 32-bit class numbers; a source's labels must fit.
LABEL_MIN, LABEL_MAX = -(2**31), 2**31 - 1


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
    # ``times + time_origin`` and ``segment_t0`` are UTC (POSIX seconds), not a source's own clock.
    utc: bool = False

    def text_of(self, row: int, channel: int) -> str | None:
        """The source's own text of one value (text sources only), for messages."""
        if self.columns is None:
            return None
        line = self.raw.split(b"\n")[self.line_of(row) - self.first_line]
        fields = split_fields(line.decode("utf-8", "replace").rstrip("\r"), self.delimiter) or []
        col = self.columns[channel] - 1
        return fields[col].strip().strip('"').strip() if col < len(fields) else None

    def where(self, row: int, channel: int | None = None) -> str:
        """Where data row ``row`` (and ``channel``) of this block sits in its source."""
        if self.unit == "row":
            at = f"{self.name}: row {self.first_line + row} (counted from 0)"
            return at if channel is None else f"{at}, column {channel} (counted from 0)"
        at = f"{self.name}:{self.line_of(row)}"
        if channel is not None and self.columns is not None:
            at += f":{self.columns[channel]}"
        return at

    def line_of(self, row: int) -> int:
        """File line number of data row ``row`` of this block (blank lines are no rows)."""
        lines = self.raw.split(b"\n")
        seen = -1
        for i, line in enumerate(lines[self.header_lines :]):
            if line.strip(b"\r"):
                seen += 1
                if seen == row:
                    return self.first_line + self.header_lines + i
        return self.first_line + row
