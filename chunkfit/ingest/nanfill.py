"""The ``--nan`` policies: refuse non-finite values (default), keep them as NaN, or interpolate.

Interpolation is linear in sample index per channel and runs across block boundaries: rows after
the last finite value are held back until the next finite value arrives (or the stream ends, when
they take the last finite value). A hold-back longer than ``max_hold`` rows is filled with the last
value so memory stays bounded.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import SourceFormatError
from .block import ParsedBlock

FLOAT32_MAX = float(np.finfo(np.float32).max)


def refuse_nonfinite(block: ParsedBlock, channels: list[str]) -> None:
    """Raise naming the first non-finite value's place and, for text, the text that was there."""
    bad = ~np.isfinite(block.values)
    if not bad.any():
        return
    row, col = (int(v) for v in np.argwhere(bad)[0])
    where, channel = block.where(row, col), channels[col]
    text = block.text_of(row, col)
    how = "fix the source or pass --nan keep / --nan interpolate"
    if text is None:
        value = describe_value(float(block.values[row, col]))
        raise SourceFormatError(f"{where}: {value} value in channel {channel!r}; {how}")
    if not text:
        raise SourceFormatError(f"{where}: empty value in channel {channel!r}; {how}")
    try:
        number = float(text)
    except ValueError:
        number = float("nan")
    # 1e400 is a number too big even for float64 (it parses as Inf): as out of range as 1e39.
    if np.isfinite(number) or (np.isinf(number) and "inf" not in text.lower()):
        raise SourceFormatError(
            f"{where}: {text[:40]!r} in channel {channel!r} is beyond float32 storage (largest "
            f"magnitude {FLOAT32_MAX:.4g}); rescale the column"
        )
    raise SourceFormatError(
        f"{where}: {text[:40]!r} in channel {channel!r} is not a finite number; {how}"
    )


class Interpolator:
    """Feeds rows through; yields rows whose non-finite values are filled."""

    def __init__(self, source: str, channels: list[str], max_hold: int = 4_000_000) -> None:
        self.source = source
        self.channels = list(channels)
        n_channels = len(channels)
        self.anchor: np.ndarray | None = None  # last all-finite row already emitted
        self.held: list[tuple[np.ndarray, np.ndarray | None]] = []
        self.held_rows = 0
        self.max_hold = max_hold
        self.n_channels = n_channels

    @property
    def pending(self) -> int:
        """Rows taken in but not yet returned: they come out ahead of the next block's rows."""
        return self.held_rows

    def push(
        self, values: np.ndarray, labels: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return the rows that can be filled now (possibly none)."""
        vals = values.copy()
        vals[~np.isfinite(vals)] = np.nan
        if self.held:
            vals = np.concatenate([h[0] for h in self.held] + [vals])
            if labels is not None:
                labels = np.concatenate([h[1] for h in self.held if h[1] is not None] + [labels])
            self.held, self.held_rows = [], 0
        finite_rows = np.flatnonzero(np.isfinite(vals).all(axis=1))
        cut = int(finite_rows[-1]) + 1 if finite_rows.size else 0
        if cut < vals.shape[0]:
            if vals.shape[0] - cut > self.max_hold:
                cut = vals.shape[0]
            else:
                self.held = [(vals[cut:], labels[cut:] if labels is not None else None)]
                self.held_rows = vals.shape[0] - cut
        out = vals[:cut]
        self._fill(out, final=cut == vals.shape[0])
        return out, (labels[:cut] if labels is not None else None)

    def finish(self) -> tuple[np.ndarray, np.ndarray | None]:
        if not self.held:
            return np.zeros((0, self.n_channels)), None
        vals = np.concatenate([h[0] for h in self.held])
        labels = None
        if self.held[0][1] is not None:
            labels = np.concatenate([h[1] for h in self.held])  # type: ignore[misc]
        self.held = []
        self._fill(vals, final=True)
        return vals, labels

    def _fill(self, vals: np.ndarray, final: bool) -> None:
        if vals.shape[0] == 0:
            return
        for j in range(vals.shape[1]):
            col = vals[:, j]
            ok = np.isfinite(col)
            if ok.all():
                continue
            xs = np.flatnonzero(ok).astype(np.float64)
            ys = col[ok]
            if self.anchor is not None:
                xs = np.concatenate([[-1.0], xs])
                ys = np.concatenate([[self.anchor[j]], ys])
            if xs.size == 0:
                raise SourceFormatError(
                    f"{self.source}: channel {self.channels[j]!r} holds no finite value to "
                    "interpolate from; leave it out with --columns"
                )
            col[~ok] = np.interp(np.flatnonzero(~ok), xs, ys)
        self.anchor = vals[-1].copy()


def describe_value(v: float) -> str:
    """A non-finite value as a message names it."""
    return "NaN" if math.isnan(v) else ("Inf" if v > 0 else "-Inf")
