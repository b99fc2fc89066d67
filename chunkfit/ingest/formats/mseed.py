"""MiniSEED (v2 and v3), read in bounded memory, record by record, with ``pymseed`` (``[mseed]``).

One channel per source id, named network.station.location.channel (``XX.STA..HHZ``), in the order
the file first names them; ``--columns`` picks among them, ``--names`` renames them. Every channel
of a store shares one time axis, so:

- the chosen channels must share one sample rate (else the source is refused, naming each rate);
- each channel's records, in file order, make continuous runs: a record that starts more than half
  a sample after the previous one ended opens a gap, one that starts earlier overlaps: the samples
  it repeats are dropped (the first data read wins) and the rest starts a new run. Records are
  expected in time order per channel, as data centres deliver them;
- the stored segments are the time spans every chosen channel covers, row k of a segment being the
  sample of each channel nearest to (within half a sample of) the segment's start + k / rate.

Memory: a first pass reads the record headers only (no samples) and keeps one entry per run; the
second pass reads each channel's records through a reader of its own and holds at most one block
of rows plus one record per channel. Several files append as separate sources; the pipeline
ingests them in the order of their first record's start time (``in_time_order``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...config import IngestOptions
from ...errors import IncompatibleError, SourceFormatError, UsageError
from ..block import ParsedBlock
from ..source import Source
from .base import files_sha256, pick_columns, refuse_text_options, require

RATE_TOLERANCE = 1e-6
# A channel this far off the shared time axis (in samples) is reported when aligned; MiniSEED times
# are in ns, so smaller offsets are rounding, not a shift.
ALIGN_TOLERANCE = 1e-3


def _pymseed(spec: str) -> Any:
    return require("pymseed", "mseed", spec, "MiniSEED files")


def channel_name(sourceid: str) -> str:
    """``FDSN:XX_STA__H_H_Z`` -> ``XX.STA..HHZ``; a source id of another kind is kept as it is."""
    if sourceid.startswith("FDSN:"):
        import pymseed

        try:
            return ".".join(pymseed.sourceid2nslc(sourceid))
        except (ValueError, RuntimeError):
            return sourceid
    return sourceid


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


@dataclasses.dataclass
class _Run:
    start_ns: int
    n: int


class _ChannelRuns:
    """One channel's continuous runs, built record by record (the same way in both passes)."""

    def __init__(self, sid: str, rate: float) -> None:
        self.sid = sid
        self.rate = rate
        self.period_ns = 1e9 / rate
        self.runs: list[_Run] = []

    def end_ns(self, run: _Run) -> int:
        return run.start_ns + round(run.n * self.period_ns)

    def add_record(self, start_ns: int, count: int) -> tuple[int, int]:
        """Add a record's ``count`` samples from ``start_ns``.

        Returns (samples dropped as an overlap, index of the run they joined)."""
        if count <= 0:
            return count, -1
        if not self.runs:
            self.runs.append(_Run(start_ns, count))
            return 0, 0
        last = self.runs[-1]
        end = self.end_ns(last)
        if abs(start_ns - end) <= self.period_ns / 2:
            last.n += count
            return 0, len(self.runs) - 1
        skip = 0
        if start_ns < end:  # an overlap: the samples before the end already read are repeats
            skip = max(0, math.ceil((end - start_ns) / self.period_ns - 0.5))
            if skip >= count:
                return count, -1
        self.runs.append(_Run(start_ns + round(skip * self.period_ns), count - skip))
        return skip, len(self.runs) - 1


@dataclasses.dataclass(frozen=True)
class _Segment:
    start_ns: int
    at: tuple[tuple[int, int], ...]  # per chosen channel: (run index, first sample in that run)
    rows: int


def _scan_headers(spec: str, path: Path) -> list[_ChannelRuns]:
    """First pass, headers only: each channel's rate and runs, in the order the file names them."""
    pymseed = _pymseed(spec)
    channel_runs: dict[str, _ChannelRuns] = {}
    offset = 0
    try:
        with pymseed.MS3RecordReader(str(path), unpack_data=False) as reader:
            while (r := reader.read()) is not None:
                sid, rate, start, count = (
                    r.sourceid,
                    float(r.samprate),
                    int(r.starttime),
                    int(r.samplecnt),
                )
                if count > 0 and not rate > 0:
                    raise SourceFormatError(
                        f"{spec}: the record at byte {offset:,} ({channel_name(sid)}) has {count} "
                        "samples but no sample rate; chunkfit reads regularly sampled data"
                    )
                runs = channel_runs.get(sid)
                if count > 0 and runs is None:
                    runs = channel_runs[sid] = _ChannelRuns(sid, rate)
                if count > 0 and runs is not None:
                    if abs(rate - runs.rate) > RATE_TOLERANCE * runs.rate:
                        raise SourceFormatError(
                            f"{spec}: {channel_name(sid)} changes rate from {runs.rate:g} Hz to "
                            f"{rate:g} Hz at byte {offset:,}; split the file where the rate "
                            "changes and ingest the parts into separate stores"
                        )
                    runs.add_record(start, count)
                offset += int(r.reclen)
    except pymseed.MiniSEEDError as err:
        raise SourceFormatError(
            f"{spec}: damaged MiniSEED data at byte {offset:,}: {_one_line(err)}; copy the file "
            "again"
        ) from None
    if not channel_runs:
        raise SourceFormatError(f"{spec}: empty source: no MiniSEED record with data samples")
    return list(channel_runs.values())


def _common_segments(channel_runs: Sequence[_ChannelRuns]) -> list[_Segment]:
    """The spans every channel covers, as segments of rows (see the module docstring)."""
    period = channel_runs[0].period_ns
    spans = [(r.start_ns, channel_runs[0].end_ns(r)) for r in channel_runs[0].runs]
    for t in channel_runs[1:]:
        other = [(r.start_ns, t.end_ns(r)) for r in t.runs]
        out, i, j = [], 0, 0
        while i < len(spans) and j < len(other):
            a, b = max(spans[i][0], other[j][0]), min(spans[i][1], other[j][1])
            if b > a:
                out.append((a, b))
            if spans[i][1] < other[j][1]:
                i += 1
            else:
                j += 1
        spans = out
    segments = []
    for a, b in spans:
        at, rows = [], round((b - a) / period)
        for t in channel_runs:
            k = next(k for k, r in enumerate(t.runs) if r.start_ns - period / 2 <= a < t.end_ns(r))
            first = max(0, round((a - t.runs[k].start_ns) / period))
            rows = min(rows, t.runs[k].n - first)
            at.append((k, first))
        if rows > 0:
            segments.append(_Segment(a, tuple(at), rows))
    return segments


def _alignment_notices(
    spec: str, names: Sequence[str], channels: Sequence[_ChannelRuns], segments: list[_Segment]
) -> tuple[str, ...]:
    """One line per channel whose samples sit a fraction of a sample off its segment's time axis
    (row k of a segment is each channel's sample nearest to start + k / rate): the shift said."""
    worst: dict[int, float] = {}
    for seg in segments:
        for j, (t, (run, first)) in enumerate(zip(channels, seg.at, strict=True)):
            at = t.runs[run].start_ns + first * t.period_ns
            off = (at - seg.start_ns) / t.period_ns
            if abs(off) > ALIGN_TOLERANCE and abs(off) > abs(worst.get(j, 0.0)):
                worst[j] = off
    return tuple(
        f"{spec}: {names[j]} starts {abs(off):.3g} sample(s) "
        f"{'after' if off > 0 else 'before'} the stored time axis ({abs(off) * t:.3g} s); "
        "its samples were aligned to the nearest sample"
        for j, off in sorted(worst.items())
        for t in [channels[j].period_ns / 1e9]
    )


class _ChannelReader:
    """Second pass for one channel: its samples in run order, one record at a time."""

    def __init__(self, spec: str, path: Path, channel: _ChannelRuns) -> None:
        pymseed = _pymseed(spec)
        self.spec = spec
        self.sid = channel.sid
        self.replay = _ChannelRuns(channel.sid, channel.rate)
        pattern = None if any(c in channel.sid for c in "*?[") else channel.sid
        self.reader = pymseed.MS3RecordReader(str(path), unpack_data=True, sourceid=pattern)
        self.error = pymseed.MiniSEEDError
        # (run, first sample in run, samples) of the records read and not yet taken
        self.pieces: deque[tuple[int, int, np.ndarray]] = deque()
        self.last_time = "the start of the file"

    def _read_record(self) -> None:
        try:
            r = self.reader.read()
            while r is not None and r.sourceid != self.sid:
                r = self.reader.read()
            if r is None:
                raise SourceFormatError(
                    f"{self.spec}: {channel_name(self.sid)} ended early; was the file changed "
                    "while it was read?"
                )
            count, start = int(r.samplecnt), int(r.starttime)
            data = np.array(r.np_datasamples) if r.numsamples else np.zeros(0)
            when = r.starttime_str()
        except self.error as err:
            raise SourceFormatError(
                f"{self.spec}: damaged MiniSEED record of {channel_name(self.sid)} after "
                f"{self.last_time}: {_one_line(err)}; copy the file again"
            ) from None
        if data.shape[0] != count:
            raise SourceFormatError(
                f"{self.spec}: the record of {channel_name(self.sid)} at {when} declares {count} "
                f"samples but holds {data.shape[0]}; copy the file again"
            )
        self.last_time = when
        skip, run = self.replay.add_record(start, count)
        if skip < count:
            self.pieces.append((run, self.replay.runs[run].n - (count - skip), data[skip:]))

    def take(self, run: int, first: int, n: int) -> np.ndarray:
        """Samples [first, first + n) of run ``run``; everything before them is passed over."""
        out: list[np.ndarray] = []
        while n > 0:
            if not self.pieces:
                self._read_record()
                continue
            prun, pfirst, samples = self.pieces[0]
            if (prun, pfirst + samples.shape[0]) <= (run, first):
                self.pieces.popleft()
                continue
            lo = first - pfirst
            if prun != run or lo < 0:
                raise RuntimeError(
                    f"MiniSEED replay out of step: run {prun}/{run}, sample {pfirst}/{first}"
                )
            part = samples[lo : lo + n]
            out.append(part)
            first, n = first + part.shape[0], n - part.shape[0]
            if lo + part.shape[0] >= samples.shape[0]:
                self.pieces.popleft()
        return np.concatenate(out) if len(out) != 1 else out[0]

    def close(self) -> None:
        self.reader.close()


def open_source(spec: str, path: Path, options: IngestOptions) -> MiniSEEDSource:
    _pymseed(spec)
    refuse_text_options(spec, "MiniSEED", options)
    if options.annotations is not None:
        raise UsageError(
            f"{spec}: --annotations applies to WFDB and EDF+ files; MiniSEED files carry none"
        )
    return MiniSEEDSource(spec, path, options)


class MiniSEEDSource(Source):
    format = "MiniSEED"

    def __init__(self, spec: str, path: Path, options: IngestOptions) -> None:
        self.name = spec
        self.path = path
        self.size = path.stat().st_size
        channel_runs = _scan_headers(spec, path)
        names = [channel_name(t.sid) for t in channel_runs]
        if options.names is not None:
            if len(options.names) != len(names):
                raise UsageError(
                    f"{spec}: --names gives {len(options.names)} name(s) for {len(names)} "
                    f"channel(s) ({', '.join(names)})"
                )
            names = list(options.names)
        chosen = [channel_runs[i] for i in pick_columns(spec, names, options.columns)]
        self.channels = [names[channel_runs.index(t)] for t in chosen]
        rates = {t.rate for t in chosen}
        if max(rates) - min(rates) > RATE_TOLERANCE * max(rates):
            listed = ", ".join(
                f"{n} {t.rate:g} Hz" for n, t in zip(self.channels, chosen, strict=True)
            )
            raise IncompatibleError(
                f"{spec}: the channels have different sample rates ({listed}); a store has one "
                "rate: pick channels of one rate with --columns"
            )
        self.rate = chosen[0].rate
        self._chosen = chosen
        self._segments = _common_segments(chosen)
        if not self._segments:
            raise SourceFormatError(
                f"{spec}: the channels {', '.join(self.channels)} never record at the same time; "
                "ingest them separately (pick with --columns)"
            )
        self._step = max(1, options.block_bytes // (4 * len(chosen)))
        self.notices = _alignment_notices(spec, self.channels, chosen, self._segments)

    def time_spans(self) -> list[tuple[int, int]]:
        period = self._chosen[0].period_ns
        return [(g.start_ns, g.start_ns + round(g.rows * period)) for g in self._segments]

    def blocks(self) -> Iterator[ParsedBlock]:
        readers = [_ChannelReader(self.name, self.path, t) for t in self._chosen]
        try:
            for seg in self._segments:
                for a in range(0, seg.rows, self._step):
                    n = min(self._step, seg.rows - a)
                    values = np.empty((n, len(readers)), dtype=np.float32)
                    for j, (s, (run, first)) in enumerate(zip(readers, seg.at, strict=True)):
                        values[:, j] = self._float32(s.take(run, first + a, n), j)
                    t0 = seg.start_ns / 1e9 if a == 0 else None
                    yield ParsedBlock(
                        values,
                        None,
                        None,
                        self.rows,
                        b"",
                        0,
                        self.name,
                        "row",
                        segment_t0=t0,
                        utc=True,
                    )
                    self.rows += n
        finally:
            for s in readers:
                s.close()

    def _float32(self, samples: np.ndarray, channel: int) -> np.ndarray:
        with np.errstate(over="ignore"):
            cast = samples.astype(np.float32)
        over = np.isinf(cast) & np.isfinite(samples)
        if over.any():
            raise SourceFormatError(
                f"{self.name}: {float(samples[np.flatnonzero(over)[0]]):g} in channel "
                f"{self.channels[channel]!r} is beyond float32 storage (largest magnitude "
                f"{float(np.finfo(np.float32).max):.4g}); rescale it"
            )
        return cast

    def sha256(self) -> str:
        return files_sha256([self.path])


def first_start(spec: str, path: Path) -> int:
    """Start time (ns) of the file's first record, to put several files in time order."""
    pymseed = _pymseed(spec)
    try:
        with pymseed.MS3RecordReader(str(path), unpack_data=False) as reader:
            r = reader.read()
            return int(r.starttime) if r is not None else 0
    except pymseed.MiniSEEDError:
        return 0  # a damaged file keeps its place; opening it names the damage
