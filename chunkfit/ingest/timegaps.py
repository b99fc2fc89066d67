"""A text source's time column: the sample rate it implies (unless ``--rate`` gives one), time that
goes backwards or repeats (refused), and the gaps longer than ``gap_factor`` sample periods that
start a new segment.
"""

from __future__ import annotations

import numpy as np

from ..errors import SourceFormatError
from .block import ParsedBlock


def round_rate(rate: float) -> float:
    """A derived rate to seven significant digits, as it is stored."""
    return float(f"{rate:.7g}")


class TimeGaps:
    """Derives the rate, refuses time going backwards, and finds the gaps that split segments."""

    def __init__(self, rate: float | None, gap_factor: float) -> None:
        self.rate = rate
        self.gap_factor = gap_factor
        self.last: float | None = None

    def segment_starts(self, block: ParsedBlock) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the block that start a new segment, and the times of all rows."""
        assert block.times is not None
        t = block.times
        col = f":{block.time_column}" if block.time_column is not None else ""
        if not np.isfinite(t).all():
            row = int(np.flatnonzero(~np.isfinite(t))[0])
            raise SourceFormatError(
                f"{block.where(row)}{col}: time value is not finite; every row needs a time"
            )
        prev = (
            np.concatenate([[self.last], t[:-1]])
            if self.last is not None
            else np.concatenate([[np.nan], t[:-1]])
        )
        dt = t - prev
        back = np.flatnonzero(dt <= 0)
        if back.size:
            row = int(back[0])
            raise SourceFormatError(
                f"{block.where(row)}{col}: time goes backwards or repeats ({float(t[row]):.9g} s "
                f"after {float(prev[row]):.9g} s); sort the log by time or split it into separate "
                "sources"
            )
        if self.rate is None:
            steps = dt[np.isfinite(dt)]
            if steps.size:
                typical = float(np.median(steps))
                regular = steps[steps <= self.gap_factor * typical]
                self.rate = round_rate(regular.size / float(regular.sum()))
        self.last = float(t[-1])
        if self.rate is None:
            return np.zeros(0, dtype=np.int64), t
        return np.flatnonzero(dt > self.gap_factor / self.rate), t
