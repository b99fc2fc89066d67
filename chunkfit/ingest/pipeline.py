"""``ingest``: sources in, one store transaction out, in bounded memory."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._fs import refuse_url
from ..config import IngestOptions
from ..errors import IncompatibleError, SourceFormatError, SourceNotFoundError, UsageError
from ..store.layout import check_store_path
from ..store.reader import Store
from ..store.segtimes import clock_record, utc_record
from ..store.writer import StoreWriter
from .block import ParsedBlock
from .events import Anchor, read_events
from .formats import in_time_order, recording_kind
from .live import LiveWriter, commit_interval
from .nanfill import Interpolator, refuse_nonfinite
from .source import Source
from .sources import open_source, source_path, split_hdf5_spec
from .textsource import TextSource
from .timegaps import TimeGaps

RATE_TOLERANCE = 0.01


@dataclasses.dataclass(frozen=True)
class IngestProgress:
    """What a progress display needs: the source, rows and bytes so far, its size if known."""

    source: str
    rows: int
    bytes_read: int
    total_bytes: int | None


@dataclasses.dataclass(frozen=True)
class IngestReport:
    """What one ingest added."""

    store: str
    samples: int
    segments: int
    events: int
    sources: list[dict[str, Any]]
    seconds: float
    sample_rate: float | None
    interrupted: bool = False
    notices: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _IngestJob:
    """One call of ``ingest``: its sources, read one after another into one writer."""

    def __init__(
        self,
        store: str,
        options: IngestOptions,
        append: bool,
        progress: Callable[[IngestProgress], None] | None,
    ) -> None:
        self.store = store
        self.options = options
        self.append = append
        self.progress = progress
        self.writer: StoreWriter | LiveWriter | None = None
        self.commit_every: float | None = None  # a live stream's commit interval (ingest.live)
        self.current: Source | None = None
        self.anchors: list[Anchor] = []
        self.segments = 0
        self.records: list[dict[str, Any]] = []
        self.notices: list[str] = []
        self.spans: list[tuple[str, int, int]] = []  # (source, start ns, end ns) of dated sources
        self.interrupted = False
        self.rate: float | None = options.rate
        self.marks: list[np.ndarray] = []  # annotations the sources carried, as absolute samples
        self.store_rate: float | None = None  # the rate of the store appended to
        self.base_sources = 0  # source records the store held before this ingest

    def _live_status(self) -> tuple[float | None, list[dict[str, Any]]]:
        return self.rate, self.records + (
            [self.current.record()] if self.current is not None else []
        )

    def _open_writer(self, first: Source) -> StoreWriter | LiveWriter:
        channels = first.channels
        if self.append:
            with Store(self.store, contents=False) as existing:  # on object storage, its root only
                if existing.channels != channels:
                    raise IncompatibleError(
                        f"{first.name}: channels {channels} differ from the store's "
                        f"{existing.channels}; append only recordings with the same channels "
                        "(choose them with --columns)"
                    )
                if existing.has_labels != first.has_labels:
                    need = (
                        "needs --label-column"
                        if existing.has_labels
                        else "has no labels: drop --label-column"
                    )
                    raise IncompatibleError(f"{first.name}: the store {need}")
                self.store_rate = existing.sample_rate
                self.base_sources = len(existing.attrs.get("sources", []))
            if self.rate is not None:
                self._agree_rate(self.rate, "--rate")
        if self.commit_every is not None:
            return LiveWriter(
                self.store,
                channels=channels,
                sample_rate=self.rate,
                has_labels=first.has_labels,
                append=self.append,
                chunk_samples=self.options.chunk_samples,
                codec=self.options.codec,
                commit_every=self.commit_every,
                status=self._live_status,
            )
        return StoreWriter(
            self.store,
            channels=channels,
            sample_rate=self.rate,
            has_labels=first.has_labels,
            append=self.append,
            chunk_samples=self.options.chunk_samples,
            codec=self.options.codec,
        )

    def run(self, specs: Sequence[str]) -> IngestReport:
        started = time.perf_counter()
        _check_inputs(specs, self.options)
        specs = in_time_order(specs)  # several MiniSEED files of one station append in time order
        first = open_source(specs[0], self.options)
        self.writer = self._open_writer(first)
        with self.writer as w:
            source: Source | None = first
            for spec in specs:
                if source is None:
                    source = open_source(spec, self.options)
                    if source.channels != w.channels:
                        raise IncompatibleError(
                            f"{source.name}: channels {source.channels} differ from {w.channels} "
                            f"of {specs[0]}; a store holds one set of channels: ingest each "
                            "instrument into a store of its own, or, if they are one channel "
                            f"under two names, give it one name with --names {','.join(w.channels)}"
                        )
                    if source.has_labels != first.has_labels:
                        raise IncompatibleError(
                            f"{source.name}: every source needs the same --label-column"
                        )
                self._refuse_overlap(source)
                before = w.total
                self._ingest_source(source, w)
                self.notices += source.notices
                if w.total == before and not self.interrupted:
                    raise SourceFormatError(f"{source.name}: empty source: no data rows to ingest")
                self.records.append(source.record())
                source = None
            added = w.total - w.start
            if added == 0:
                raise SourceFormatError(f"{specs[0]}: empty source: no rows to ingest")
            self._rate_from_store_if_unknown()
            w.attrs["sample_rate"] = w.attrs.get("sample_rate") or self.rate
            found = list(self.marks)
            if self.options.events is not None:
                found.append(
                    read_events(
                        self.options.events,
                        offset=w.start,
                        added=added,
                        anchors=self.anchors,
                        rate=self.rate,
                    )
                )
            n_events = 0
            if found:
                ev = np.unique(np.concatenate(found))
                w.add_events(ev)
                n_events = int(ev.size)
            for rec in self.records:
                w.add_source(rec)
            w.commit()
        return IngestReport(
            store=self.store,
            samples=added,
            segments=self.segments,
            events=n_events,
            sources=self.records,
            seconds=time.perf_counter() - started,
            sample_rate=self.rate,
            interrupted=self.interrupted,
            notices=self.notices,
        )

    def _refuse_overlap(self, source: Source) -> None:
        """Refuse a dated recording whose time overlaps an earlier source's: its samples would be
        stored twice (within one file, the first data wins; across files, the user chooses)."""
        spans = source.time_spans()
        for name, a, b in self.spans:
            for c, d in spans:
                both = min(b, d) - max(a, c)
                if both > 0:
                    raise IncompatibleError(
                        f"{source.name}: records {_iso(max(a, c))} to {_iso(min(b, d))} again "
                        f"({both / 1e9:g} s), already read from {name}; the store would hold "
                        "those times twice: ingest one of the files, or each into a store of its "
                        "own"
                    )
        self.spans += [(source.name, c, d) for c, d in spans]

    def _rate_from_store_if_unknown(self) -> None:
        if self.rate is None:
            self.rate = self.store_rate

    def _agree_rate(self, rate: float, where: str) -> None:
        """Adopt the first rate seen; refuse a source (or --rate) whose rate differs by over 1 %."""
        reference, what = self.rate, "the earlier sources"
        if self.store_rate is not None:
            reference, what = self.store_rate, f"the store {self.store}"
        elif reference is not None and reference == self.options.rate:
            what = "--rate"  # the rate came from the option, not from a source
        if reference is not None and abs(reference - rate) > RATE_TOLERANCE * reference:
            fix = (
                "drop --rate to take the file's own rate, or resample it"
                if what == "--rate"
                else "resample it or ingest it into a separate store"
            )
            raise IncompatibleError(
                f"{where}: runs at {rate:g} Hz, {what} at {reference:g} Hz; {fix}"
            )
        if self.rate is None:
            self.rate = reference if reference is not None else rate

    def _ingest_source(self, source: Source, w: StoreWriter | LiveWriter) -> None:
        opts = self.options
        # Each source derives its own rate (unless --rate): a source at another rate is refused
        # rather than split into one-sample segments or stored at the wrong rate.
        time_gaps = TimeGaps(opts.rate, opts.gap_factor) if source.has_time else None
        if source.rate is not None:
            self._agree_rate(source.rate, source.name)
        rate_checked = False
        first = w.total
        interp = Interpolator(source.name, source.channels) if opts.nan == "interpolate" else None
        seg_start = w.total
        seg_t0: float | None = None
        live = w if isinstance(w, LiveWriter) else None
        if live is not None and isinstance(source, TextSource):
            source.when_idle(live.commit_if_due)
        self.current = source
        for block in source.blocks():
            if block.values.shape[0] == 0:
                continue
            cuts = np.zeros(0, dtype=np.int64)
            if time_gaps is not None:
                cuts, times = time_gaps.segment_starts(block)
                if not rate_checked and time_gaps.rate is not None:
                    self._agree_rate(time_gaps.rate, source.name)
                    rate_checked = True
                if seg_t0 is None:
                    seg_t0 = float(times[0]) + block.time_origin
                    self._date(w, seg_start, seg_t0, block.utc)
            if block.segment_t0 is not None:
                # A recording format starts a new segment here (MiniSEED gaps, its first block).
                at = w.total + (interp.pending if interp is not None else 0)
                self._close_segment(w, seg_start, at, seg_t0)
                seg_start, seg_t0 = at, block.segment_t0
                self._date(w, at, seg_t0, block.utc)
            base = self._write_rows(block, source, interp, w)
            for row in cuts.tolist():
                at = base + row
                self._close_segment(w, seg_start, at, seg_t0)
                seg_start, seg_t0 = at, float(times[row]) + block.time_origin
                self._date(w, at, seg_t0, block.utc)
            self._report(source)
            if live is not None:
                live.commit_if_due()
        if interp is not None:
            vals, labels = interp.finish()
            w.write(vals, labels)
        self._close_segment(w, seg_start, w.total, seg_t0)
        marks = source.events()
        if marks.size:
            self.marks.append(first + marks)
        self.current = None
        if isinstance(source, TextSource) and source.interrupted:
            self.interrupted = True

    def _write_rows(
        self,
        block: ParsedBlock,
        source: Source,
        interp: Interpolator | None,
        w: StoreWriter | LiveWriter,
    ) -> int:
        """Write a block's rows under the ``--nan`` policy; returns the store row of its first."""
        if self.options.nan == "refuse":
            refuse_nonfinite(block, source.channels)
        # Rows the interpolator still holds are written ahead of this block's rows.
        base = w.total + (interp.pending if interp is not None else 0)
        if interp is not None:
            vals, labels = interp.push(block.values, block.labels)
        else:
            vals, labels = block.values, block.labels
        w.write(vals, labels)
        return base

    def _report(self, source: Source) -> None:
        if self.progress is not None:
            bytes_read = getattr(source, "bytes_read", 0)
            self.progress(IngestProgress(source.name, source.rows, bytes_read, source.size))

    def _date(self, w: StoreWriter | LiveWriter, start: int, t0: float, utc: bool) -> None:
        """Record when the segment starting at sample ``start`` began (chunkfit.store.segtimes):
        a UTC time, or a time on this source's own clock."""
        source = self.base_sources + len(self.records)
        w.add_segment_time(utc_record(start, t0) if utc else clock_record(start, t0, source))

    def _close_segment(
        self, w: StoreWriter | LiveWriter, start: int, stop: int, t0: float | None
    ) -> None:
        if stop > start:
            w.add_segment(start, stop)
            self.segments += 1
            if t0 is not None:
                self.anchors.append(Anchor(start, stop, t0))


def _check_inputs(specs: Sequence[str], options: IngestOptions) -> None:
    """Refuse missing files before any work, so a typo in the last source costs nothing."""
    for spec in specs:
        if spec == "-":
            continue
        refuse_url(spec, "sources")
        path = spec
        hdf5 = split_hdf5_spec(spec)
        if hdf5 is not None:
            path = hdf5[0]
        if not source_path(path).exists():
            raise SourceNotFoundError(f"{path}: no such file; check the path")
    if options.events is not None:
        refuse_url(options.events, "--events")
    if options.events is not None and os.path.isdir(options.events):
        raise SourceFormatError(
            f"{options.events}: is a directory; --events takes a file of markers, one per line"
        )
    if options.events is not None and not os.path.isfile(options.events):
        raise SourceNotFoundError(f"{options.events}: events file not found; check --events")


def ingest(
    store: str | os.PathLike[str],
    sources: Sequence[str] = ("-",),
    options: IngestOptions | None = None,
    *,
    append: bool = False,
    progress: Callable[[IngestProgress], None] | None = None,
) -> IngestReport:
    """Ingest ``sources`` (paths, ``file.h5:/dataset`` or ``-`` for stdin) into ``store``.

    A new store appears only when everything was read; with ``append=True`` the new recordings
    are added as new segments in one all-or-nothing transaction. A stream on standard input (a pipe
    or terminal) into a zarr store is committed every ``options.commit_every`` seconds instead
    (default 1 s; chunkfit.ingest.live), each commit all-or-nothing.
    """
    options = options or IngestOptions()
    specs = list(sources) or ["-"]
    if specs.count("-") > 1:
        raise UsageError("standard input (-) can be given only once")
    store = os.fspath(store)
    kind = recording_kind(store)
    if kind is not None:
        raise UsageError(
            f"{store} is {kind}, not a store; the store comes first: chunkfit ingest STORE.zarr "
            f"{store}"
        )
    if not append and os.path.exists(store):
        raise UsageError(
            f"{store}: already exists; pass --append to add recordings, or choose a new path"
        )
    check_store_path(store)
    job = _IngestJob(store, options, append, progress)
    job.commit_every = commit_interval(store, specs, options)
    return job.run(specs)


def _iso(ns: int) -> str:
    """A time in ns as ISO 8601 UTC, to the millisecond."""
    return str(np.datetime64(ns, "ns").astype("datetime64[ms]")) + "Z"
