"""When each segment was recorded: the store attribute ``segment_times``.

Ingest records one entry per segment whose source dates it, keyed by the segment's first sample:

- ``{"sample": 0, "utc": "2024-05-01T12:00:00.000000Z"}``: the segment's first sample was taken at
  this UTC time (ISO 8601, to the microsecond): MiniSEED, EDF+, WFDB with a base date, CSV and
  Parquet time columns holding timestamps;
- ``{"sample": 7200, "seconds": 3612.5, "source": 1}``: a numeric time column read it at 3612.5 s
  on the clock of source 1 (its index in ``sources``), which says how long a gap between two
  segments of that source lasted, but not when it was.

A store written before this attribute, or from sources without times, has no entry: its segments
are placed end to end and it has no UTC times. Entries whose sample starts no segment are ignored.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

KEY = "segment_times"


@dataclasses.dataclass(frozen=True)
class SegmentTime:
    """When one segment's first sample was taken: ``utc_us`` (microseconds since 1970, UTC), or
    ``seconds`` on the clock of source ``source``."""

    utc_us: int | None = None
    seconds: float | None = None
    source: int | None = None

    def same_clock(self, other: SegmentTime) -> bool:
        if self.utc_us is not None:
            return other.utc_us is not None
        return other.seconds is not None and other.source == self.source

    def minus(self, other: SegmentTime) -> float:
        """Seconds from ``other`` to this time, on their shared clock."""
        if self.utc_us is not None and other.utc_us is not None:
            return (self.utc_us - other.utc_us) / 1e6
        assert self.seconds is not None and other.seconds is not None
        return self.seconds - other.seconds


def utc_record(sample: int, t0: float) -> dict[str, Any]:
    """The entry of a segment starting at ``sample`` at POSIX time ``t0`` (seconds)."""
    return {"sample": int(sample), "utc": iso_utc(round(t0 * 1e6))}


def clock_record(sample: int, seconds: float, source: int) -> dict[str, Any]:
    """The entry of a segment starting at ``seconds`` on the clock of source ``source``."""
    return {"sample": int(sample), "seconds": float(seconds), "source": int(source)}


def iso_utc(us: int) -> str:
    """Microseconds since 1970 as ISO 8601 UTC: ``2024-05-01T12:00:00.000000Z``."""
    return str(np.datetime64(int(us), "us")) + "Z"


def parse_utc(text: str) -> int:
    """ISO 8601 UTC (as ``iso_utc`` writes it) to microseconds since 1970."""
    return int(np.datetime64(text.rstrip("Z"), "us").astype(np.int64))


def check(bad: Any, value: Any) -> None:
    """Refuse a ``segment_times`` attribute that is not a list of entries as described above."""
    if not isinstance(value, list):
        raise bad(f"{KEY} must be a list of entries (found {type(value).__name__})")
    for entry in value:
        ok = isinstance(entry, dict) and _is_int(entry.get("sample")) and entry["sample"] >= 0
        if ok and "utc" in entry:
            try:
                parse_utc(entry["utc"])
            except (TypeError, ValueError, AttributeError):
                ok = False
        elif ok:
            secs, src = entry.get("seconds"), entry.get("source")
            ok = (
                isinstance(secs, (int, float))
                and not isinstance(secs, bool)
                and math.isfinite(secs)
                and _is_int(src)
            )
        if not ok:
            raise bad(
                f"{KEY} entries are {{sample, utc}} or {{sample, seconds, source}} "
                f"(found {str(entry)[:60]})"
            )


def segment_times(attrs: dict[str, Any], segments: np.ndarray) -> list[SegmentTime | None]:
    """The time of each segment (None where the store does not know it), from the attributes."""
    by_sample: dict[int, SegmentTime] = {}
    for entry in attrs.get(KEY) or []:
        if "utc" in entry:
            by_sample[int(entry["sample"])] = SegmentTime(utc_us=parse_utc(entry["utc"]))
        else:
            by_sample[int(entry["sample"])] = SegmentTime(
                seconds=float(entry["seconds"]), source=int(entry["source"])
            )
    return [by_sample.get(int(a)) for a in segments[:, 0].tolist()]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
