"""``chunkfit predict --follow``: score a growing store, each window as soon as its samples are
committed.

The store is polled every ``FollowOptions.poll`` seconds (a few ``stat`` calls); when a commit
changed it, it is opened again and only the new windows are scored, reading their samples plus the
``window - 1`` before them, so memory stays flat however long the stream runs. A window is scored
once all its samples are committed; the last window of a segment starts at ``stop - window``.

Window i of a segment sits at position ``i % batch_size`` of its batch, as in an offline
``predict`` (chunkfit.core.scoring), so its score is bit-identical: when the stream has ended, the
outputs equal those of ``predict`` on the final store. Detections go to the CSV as they close, one
flushed row each (the CSV is written in place, so ``tail -f`` shows them); one still open when the
stream ends is written then. The scores array is written under a temporary name and renamed into
place when following ends: after ``idle`` seconds without new samples, or on Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from ..config import FollowOptions, event_span
from ..core.detect import Detection, RunMerger
from ..core.scoring import Predictor
from ..core.windows import count_windows
from ..errors import (
    ChunkfitError,
    StoreBusyError,
    StoreChangedError,
    StoreNotFoundError,
    UsageError,
)
from ..store import Store
from ..store.layout import suffix_backend
from .channels import ChannelsArg, mapped
from .loading import load_scorer
from .outputs import LiveDetectionCsv, OutputLocks, ScoreWriter, check_outputs, write_failure
from .predict import EventRule, PredictReport
from .runs import (
    RunSpec,
    check_settings,
    check_store,
    locate_run,
    run_threshold,
    score_attrs,
)

# Windows scored per read: bounds memory when following starts on a store that is already long.
READ_WINDOWS = 65_536
# A store seen busy (an append holding its journal) is opened again for this long before giving up.
RETRY_SECONDS = 30.0
# Seconds between polls of a store on object storage, at least; and --idle's default there (a
# stream into s3 commits every 10 s: three commits missed).
REMOTE_POLL = 1.0
REMOTE_IDLE = 30.0


def default_idle(store: str | os.PathLike[str]) -> float:
    """``--idle`` when not given: 10 s, or ``REMOTE_IDLE`` for a store on object storage."""
    from ..store.urls import is_remote

    return REMOTE_IDLE if is_remote(store) else FollowOptions().idle


@dataclasses.dataclass(frozen=True)
class FollowReport(PredictReport):
    ended: str = ""  # "idle" or "interrupted"
    samples: int = 0


def _stamp(path: Path | str) -> tuple[int, ...] | None:
    """Inode, size and mtime of the files every commit rewrites, or on object storage a hash of the
    root ``zarr.json`` (the commit point: one GET); None while the store is absent."""
    if isinstance(path, str):
        from ..store.remote import ROOT, Remote, commit_stamp
        from ..store.s3errors import guarded

        remote = Remote(path)
        return commit_stamp(guarded(path, "the outputs were not written", lambda: remote.get(ROOT)))
    files = (
        [path / "zarr.json", path / "signal" / "zarr.json"]
        if suffix_backend(str(path)) == "zarr"
        else [path]
    )
    out: list[int] = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            return None
        out += [st.st_ino, st.st_size, st.st_mtime_ns]
    return tuple(out)


class _Stop:
    """Ctrl-C (SIGINT) ends following at the next poll instead of raising."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def __enter__(self) -> _Stop:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _wait_for_store(path: Path | str, options: FollowOptions, stop: _Stop) -> None:
    """A store not created yet is waited for, up to ``idle`` seconds, so both commands start in any
    order."""
    deadline = time.monotonic() + options.idle
    while _stamp(path) is None:
        if stop.requested:
            raise KeyboardInterrupt
        if time.monotonic() > deadline:
            raise StoreNotFoundError(
                f"{path}: store not found after waiting {options.idle:g} s (--idle); start "
                f"`chunkfit ingest {path} -` first, or check the path"
            )
        time.sleep(options.poll)


def _open(path: Path | str, poll: float) -> Store:
    """The store as last committed; an append under way (busy) is waited out. (An open that overlaps
    a commit reads again by itself: a StoreFormatError is damage, reported at once.)"""
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        try:
            return Store(path)
        except (StoreBusyError, StoreNotFoundError):
            if time.monotonic() > deadline:
                raise
            time.sleep(poll)


class _Follower:
    """Scores the windows of a store that only grows, segment after segment, in start order."""

    def __init__(
        self, spec: RunSpec, predictor: Predictor, merger: RunMerger, writer: ScoreWriter | None
    ) -> None:
        self.spec = spec
        self.predictor = predictor
        self.merger = merger
        self.writer = writer
        self.segment = 0  # the segment being scored
        self.next = 0  # its next window to score (counted from the segment's first)
        self.windows = 0
        self.samples = 0
        self._starts: list[
            int
        ] = []  # starts of the segments seen, to notice a store that was replaced

    def check(self, s: Store) -> None:
        seen = len(self._starts)
        starts = s.segments[:seen, 0].tolist()
        if s.n_samples < self.samples or starts != self._starts:
            raise StoreChangedError(
                f"{s.path}: the store was replaced or rewritten while following it (its segments "
                "or length "
                "changed, not just grew); follow a store that only grows, e.g. one `chunkfit "
                "ingest` streams into"
            )
        self._starts = [int(a) for a in s.segments[:, 0]]
        self.samples = s.n_samples

    def advance(self, s: Store) -> Iterator[Detection]:
        """Score every window of ``s`` not scored yet whose samples are all committed."""
        w = self.spec.windows
        if self.writer is not None:
            self.writer.grow(s.n_samples)
        while self.segment < s.segments.shape[0]:
            a, b = (int(v) for v in s.segments[self.segment])
            n = count_windows(b - a, w.window, w.stride)
            while self.next < n:
                stop = min(n, self.next + READ_WINDOWS)
                yield from self._score(s, a, self.next, stop)
                self.next = stop
            if self.segment == s.segments.shape[0] - 1:
                return  # the last segment may still grow
            self.segment, self.next = self.segment + 1, 0

    def _score(self, s: Store, a: int, first: int, stop: int) -> Iterator[Detection]:
        """Windows [first, stop) of the segment starting at ``a``, each at its offline batch
        position."""
        w, bs = self.spec.windows, self.predictor.batch_size
        samples = s.read(a + first * w.stride, a + (stop - 1) * w.stride + w.window)
        lo, hi = first // bs * bs, -(-stop // bs) * bs
        offsets = np.empty(hi - lo, dtype=np.int32)
        offsets[: first - lo] = 0  # padding before the first new window: copies of it
        offsets[first - lo : stop - lo] = np.arange(stop - first, dtype=np.int32) * w.stride
        offsets[stop - lo :] = (stop - first - 1) * w.stride
        score = self.predictor(samples, offsets)[first - lo : stop - lo, self.spec.positive]
        starts = a + np.arange(first, stop, dtype=np.int64) * w.stride
        span = np.full(int(starts[-1] - starts[0]) + 1, np.nan, dtype=np.float32)
        span[starts - starts[0]] = score
        if self.writer is not None:
            self.writer.write(int(starts[0]), span)
        self.windows += score.size
        yield from self.merger.push(starts, score, self.segment)


def follow(
    run: str | os.PathLike[str],
    store: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    events_out: str | os.PathLike[str] | None = None,
    threshold: float | None = None,
    overwrite: bool = False,
    batch_size: int = 1024,
    unsafe: bool = False,
    options: FollowOptions | None = None,
    channels: ChannelsArg | None = None,
    merge_gap: float = 0.0,
    min_duration: float = 0.0,
) -> FollowReport:
    """Score ``store`` while it grows, until it has not grown for ``options.idle`` seconds or
    Ctrl-C.

    The outputs then equal those of ``predict(run, store, out, events_out=...)`` on the final store.
    ``channels`` maps the store's channels to the run's (chunkfit.score.channels).
    """
    options = options or FollowOptions(idle=default_idle(store))
    check_settings(threshold=threshold, chunk=1, batch_size=batch_size, channels=channels)
    rule = EventRule(merge_gap, min_duration)
    from ..store.urls import is_remote

    if out is None and events_out is None:
        raise UsageError(
            "predict writes the scores (--out), the detections (--events-out) or both; give one"
        )
    remote = [str(p) for p in (out, events_out) if p is not None and is_remote(p)]
    if remote:
        raise UsageError(
            f"{remote[0]}: predict --follow writes local outputs only (it grows them in place); "
            "write them to a local path, or drop --follow to score the store as it is now"
        )
    store_path: Path | str = Path(store)
    if is_remote(
        store
    ):  # each poll is a request: once a second (a stream into s3 commits every 10 s)
        store_path, options = (
            str(store),
            dataclasses.replace(options, poll=max(options.poll, REMOTE_POLL)),
        )
    out_path = Path(out) if out is not None else None
    ev_path = Path(events_out) if events_out is not None else None
    with _Stop() as stop:
        _wait_for_store(store_path, options, stop)
        locks = OutputLocks(out_path, ev_path)
        try:
            check_outputs(out_path, ev_path, store_path, overwrite)
            locate_run(run, unsafe=unsafe)  # a wrong run is refused before TensorFlow loads
            locks.claim()
            return _follow(
                run,
                store_path,
                out_path,
                ev_path,
                threshold,
                batch_size,
                unsafe,
                options,
                stop,
                channels,
                rule,
            )
        finally:
            locks.release()


def _follow(
    run: str | os.PathLike[str],
    path: Path | str,
    out_path: Path | None,
    ev_path: Path | None,
    given: float | None,
    batch_size: int,
    unsafe: bool,
    options: FollowOptions,
    stop: _Stop,
    channels: ChannelsArg | None,
    rule: EventRule,
) -> FollowReport:
    watch = _Watch(path, options)
    writer: ScoreWriter | None = None
    try:
        s = watch.store
        scorer = load_scorer(run, unsafe=unsafe, batch_size=batch_size)
        spec = scorer.spec
        if scorer.width is not None:
            raise UsageError(
                f"{run}: predict --follow does not score dense picker runs yet; run predict on "
                "the store"
            )
        cmap = check_store(spec, s, channels)
        thresh, source = run_threshold(spec, given)
        source = scorer.threshold_source(thresh, source)
        w = spec.windows
        if out_path is not None:
            writer = ScoreWriter(
                out_path, s.n_samples, score_attrs(run, spec, thresh, s), growable=True
            )
        if ev_path is not None and ev_path.exists():
            ev_path.unlink()  # --overwrite: the old detections must not pass for new ones
        follower = _Follower(
            spec,
            mapped(scorer.predictor, cmap),
            rule.merger(w.window, w.stride, thresh, s.sample_rate, event_span(w.label, w.window)),
            writer,
        )
        detections = LiveDetectionCsv(ev_path)
        ended = watch.run(follower, detections, stop)
        detections.write(follower.merger.flush(), watch.store)
        detections.close(watch.store)
        if writer is not None and out_path is not None:
            writer.commit(out_path)
        writer = None
        return FollowReport(
            str(out_path) if out_path is not None else None,
            follower.windows,
            detections.count,
            str(ev_path) if ev_path else None,
            thresh,
            source,
            cmap.line,
            scorer.exported,
            ended=ended,
            samples=follower.samples,
        )
    except BaseException as err:
        if writer is not None:
            writer.abort()
        if isinstance(err, OSError) and not isinstance(err, ChunkfitError):
            raise write_failure(err, out_path or ev_path or Path(".")) from None
        raise
    finally:
        watch.store.close()


class _Watch:
    """The followed store as last committed, opened again whenever a commit changed its files."""

    def __init__(self, path: Path | str, options: FollowOptions) -> None:
        self.path = path
        self.options = options
        self.stamp = _stamp(path)  # before opening: a commit in between is seen by the next poll
        self.store = _open(path, options.poll)

    def _changed(self) -> bool:
        now = _stamp(self.path)
        if now is None or now == self.stamp:
            return False
        self.store.close()
        self.stamp = now
        self.store = _open(self.path, self.options.poll)
        return True

    def run(self, follower: _Follower, detections: LiveDetectionCsv, stop: _Stop) -> str:
        """Score until the store has not grown for ``idle`` seconds, or Ctrl-C; how following
        ended."""
        grown = time.monotonic()
        fresh = True
        while True:
            if fresh:
                before = follower.samples
                follower.check(self.store)
                for found in follower.advance(self.store):
                    detections.write([found], self.store)
                if follower.samples > before:
                    grown = time.monotonic()
            if stop.requested:
                return "interrupted"
            if time.monotonic() - grown > self.options.idle:
                return "idle"
            time.sleep(self.options.poll)
            fresh = self._changed()
