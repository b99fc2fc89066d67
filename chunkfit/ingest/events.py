"""Event marker files: one sample index (integer) or time (seconds or ISO 8601) per line."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from ..errors import SourceFormatError, SourceNotFoundError


@dataclasses.dataclass(frozen=True)
class Anchor:
    """Samples [start, stop) (absolute) were recorded from time ``t0`` at ``rate`` Hz."""

    start: int
    stop: int
    t0: float


def _as_seconds(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        value = np.datetime64(text.rstrip("Z"), "ns")
    except ValueError:
        return None
    return float(value.astype(np.int64)) / 1e9


def read_events(
    path: str, *, offset: int, added: int, anchors: list[Anchor], rate: float | None
) -> np.ndarray:
    """Absolute sorted sample indices of the markers in ``path``.

    Integers are sample indices counted from the first sample this ingest adds (``offset``);
    other values are times, placed through the segments' time ``anchors`` (or ``t * rate`` when
    the sources had no time column). Every marker must fall inside the samples added.
    """
    p = Path(path)
    if p.is_dir():
        raise SourceFormatError(
            f"{path}: is a directory; --events takes a file of markers, one per line"
        )
    if not p.is_file():
        raise SourceNotFoundError(f"{path}: events file not found; check --events")
    out: list[int] = []
    header: str | None = None
    with open(p, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8-sig").strip()
            except UnicodeDecodeError:
                raise SourceFormatError(
                    f"{path}:{line_no}: not UTF-8 text; re-save the events file as UTF-8"
                ) from None
            if not text or text.startswith("#"):
                continue
            text = text.split(",")[0].strip()
            if text.lstrip("-").isdigit():
                index = offset + int(text)
            else:
                seconds = _as_seconds(text)
                if seconds is not None and not math.isfinite(seconds):
                    raise SourceFormatError(
                        f"{path}:{line_no}: {text[:40]!r} is not a finite time; fix or drop the "
                        "marker"
                    )
                if seconds is None:
                    if line_no == 1:
                        header = text  # a header line, if markers follow it
                        continue
                    raise SourceFormatError(
                        f"{path}:{line_no}: {text[:40]!r} is neither a sample index nor a timestamp"
                    )
                index = _place(seconds, anchors, rate, offset, path, line_no)
            if not (offset <= index < offset + added):
                raise SourceFormatError(
                    f"{path}:{line_no}: event at sample {index - offset} is outside the signal "
                    f"(0 to {added - 1} samples in this ingest); fix or drop the marker"
                )
            out.append(index)
    if header is not None and not out:
        raise SourceFormatError(
            f"{path}:1: {header[:40]!r} is neither a sample index nor a timestamp, and no marker "
            "follows it; give one sample index or time per line"
        )
    return np.unique(np.asarray(out, dtype=np.int64))


def _place(
    seconds: float, anchors: list[Anchor], rate: float | None, offset: int, path: str, line_no: int
) -> int:
    if rate is None:
        raise SourceFormatError(
            f"{path}:{line_no}: event given as a time but the sample rate is unknown; pass --rate "
            "or --time-column"
        )
    if not anchors:
        return offset + int(round(seconds * rate))
    half = 0.5 / rate
    for a in anchors:
        if a.t0 - half <= seconds < a.t0 + (a.stop - a.start) / rate - half:
            return a.start + int(round((seconds - a.t0) * rate))
    raise SourceFormatError(
        f"{path}:{line_no}: event at time {seconds} falls in no recorded segment (outside the "
        "signal or in a gap)"
    )
