"""What every input is to the ingest pipeline: a ``Source`` with channel names that yields blocks
of rows and, once read, a provenance record. Text, array and recording-format sources subclass it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .block import ParsedBlock


class Source:
    """One input: channel names and blocks of rows, plus a provenance record once read."""

    name: str
    channels: list[str]
    has_time: bool = False
    has_labels: bool = False
    size: int | None = None
    rows: int = 0
    rate: float | None = None  # the sample rate the file itself declares (recording formats)
    format: str | None = None  # the recording format's name, for the store's source record
    notices: tuple[str, ...] = ()  # what reading changed that the user should hear of

    def time_spans(self) -> list[tuple[int, int]]:
        """[start, end) in ns of each stored segment, where the file dates them (MiniSEED), so
        that files recorded over the same time are not stored twice."""
        return []

    def blocks(self) -> Iterator[ParsedBlock]:
        raise NotImplementedError

    def events(self) -> np.ndarray:
        """Event markers the file carries (annotations), as sample indices counted from its first
        row; read once ``blocks()`` is exhausted."""
        return np.zeros(0, dtype=np.int64)

    def sha256(self) -> str:
        raise NotImplementedError

    def record(self) -> dict[str, Any]:
        out = {"name": self.name, "size": self.size, "rows": self.rows, "sha256": self.sha256()}
        if self.format is not None:
            out["format"] = self.format
        return out
