"""A live stream's store: what arrived is committed every few seconds, so readers see it grow.

Each commit is a transaction of its own. The first one is opened at once, as a one-shot ingest
opens its transaction: a new store is built under its temporary name (or, with ``--append``, under
the zarr rollback journal); every later one is opened only when it commits, from the rows kept in
memory meanwhile (at most ``commit_every`` seconds of them, or a few chunks), and appends under the
journal. So between commits no journal is held and readers open the store as it was last committed;
a ``kill -9`` loses only the rows since the last commit. On object storage each commit is an append
under the store's lease (``StoreWriter``: the root ``zarr.json`` written last commits it), every
10 s by default; between commits no lease is held.

The stream is one recording across its commits: a commit extends the store's last segment instead
of adding one, until the time column shows a gap. HDF5 stores are not committed while streaming (an
append copies the whole file): ``commit_interval`` refuses ``--commit-every`` for them.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..config import IngestOptions
from ..errors import UsageError
from ..store.layout import suffix_backend
from ..store.reader import Store
from ..store.urls import is_remote
from ..store.writer import StoreWriter

DEFAULT_COMMIT_EVERY = 1.0
# On object storage each commit is a few requests one after another and rewrites the last, partial
# chunk of every array (a PUT each, which providers bill): every 10 s, a tenth of the requests.
DEFAULT_COMMIT_EVERY_REMOTE = 10.0
# Rows kept in memory between commits, in chunks: a fast producer commits sooner than on time.
BUFFER_CHUNKS = 8

Status = Callable[[], "tuple[float | None, list[dict[str, Any]]]"]


def _stdin_is_stream() -> bool:
    """Standard input is a pipe or terminal (``< file`` is read whole and committed at the end)."""
    try:
        return not stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (OSError, ValueError):
        return False


def commit_interval(store: str, specs: Sequence[str], options: IngestOptions) -> float | None:
    """Seconds between the commits of a live stream into ``store``; None: one commit at the end."""
    given = options.commit_every
    if "-" not in specs:
        if given is not None:
            raise UsageError(
                "--commit-every applies to a stream on standard input (-); drop it to ingest files "
                "in one transaction"
            )
        return None
    if suffix_backend(store) == "hdf5":
        if given is not None:
            raise UsageError(
                f"{store}: --commit-every needs a .zarr store (an HDF5 store is copied whole at "
                "every commit); stream into NAME.zarr, or drop --commit-every to commit once at "
                "the end"
            )
        return None
    if not _stdin_is_stream():
        return given
    if given is not None:
        return given
    return DEFAULT_COMMIT_EVERY_REMOTE if is_remote(store) else DEFAULT_COMMIT_EVERY


class LiveWriter:
    """``StoreWriter``'s interface for a stream, committing every ``commit_every`` seconds.

    ``status`` returns the rate and the source records known so far, for the commits made while the
    stream runs; ``commit_if_due`` is called between blocks (and while standard input is quiet).
    """

    def __init__(
        self,
        path: str,
        *,
        channels: list[str],
        sample_rate: float | None,
        has_labels: bool,
        append: bool,
        chunk_samples: int,
        codec: str,
        commit_every: float,
        status: Status,
    ) -> None:
        self.path = path
        self.channels = list(channels)
        self.commit_every = commit_every
        self._labelled = has_labels
        self._chunk, self._codec = chunk_samples, codec
        self._status = status
        self._base_sources: list[dict[str, Any]] = []
        if append:
            with Store(path, contents=False) as existing:
                self._base_sources = list(existing.attrs.get("sources", []))
        self._w: StoreWriter | None = self._writer(append, sample_rate)
        self.start = self._w.start
        self.attrs: dict[str, Any] = {
            "sample_rate": self._w.attrs.get("sample_rate") or sample_rate
        }
        self._stored = self.start  # samples in the store as last committed
        self._rows: list[tuple[np.ndarray, np.ndarray | None]] = []
        self._buffered = 0
        self._segments: list[tuple[int, int]] = []  # closed recordings not yet committed
        self._frontier = self.start  # end of the last committed closed recording
        self._open: int | None = None  # start of the committed last segment that is still growing
        self._events: list[np.ndarray] = []
        self._sources: list[dict[str, Any]] = []
        self._times: list[dict[str, Any]] = []  # segment times not committed yet
        self._last = time.monotonic()
        self._done = False
        self.commits = 0

    def _writer(self, append: bool, rate: float | None) -> StoreWriter:
        return StoreWriter(
            self.path,
            channels=self.channels,
            sample_rate=rate,
            has_labels=self._labelled,
            append=append,
            chunk_samples=self._chunk,
            codec=self._codec,
        )

    @property
    def total(self) -> int:
        if self._w is not None:
            return self._w.total
        return self._stored + self._buffered

    @property
    def has_labels(self) -> bool:
        return self._labelled

    def write(self, signal: np.ndarray, labels: np.ndarray | None = None) -> None:
        if self._w is not None:
            self._w.write(signal, labels)
            return
        if signal.ndim != 2 or signal.shape[1] != len(self.channels):
            raise ValueError(
                f"signal block of shape {signal.shape} for {len(self.channels)} channels"
            )
        if signal.shape[0]:
            self._rows.append((signal, labels))
            self._buffered += signal.shape[0]

    def add_segment(self, start: int, stop: int) -> None:
        if stop > start:
            self._segments.append((int(start), int(stop)))

    def add_events(self, indices: np.ndarray) -> None:
        self._events.append(np.asarray(indices, dtype=np.int64))

    def add_source(self, record: dict[str, Any]) -> None:
        self._sources.append(record)

    def add_segment_time(self, record: dict[str, Any]) -> None:
        """Committed with the first commit holding the segment's first sample, so a follower
        knows the time of a segment as soon as it sees it."""
        if self._w is not None:
            self._w.add_segment_time(record)
        else:
            self._times.append(record)

    def commit_if_due(self) -> None:
        """Commit what arrived once ``commit_every`` seconds have passed since the last commit
        began, or sooner when the rows kept in memory reach a few chunks."""
        if self.total == self._stored:
            return
        if (
            time.monotonic() - self._last >= self.commit_every
            or self._buffered >= BUFFER_CHUNKS * self._chunk
        ):
            self._commit(final=False)

    def commit(self) -> None:
        """The stream ended: commit the rest, with the whole stream's events, sources and rate."""
        self._commit(final=True)
        self._done = True

    def _commit(self, final: bool) -> None:
        self._last = time.monotonic()
        rate, records = (None, self._sources) if final else self._status()
        w = self._w if self._w is not None else self._writer(True, None)
        self._w = None
        try:
            for signal, labels in self._rows:
                w.write(signal, labels)
            end = w.total
            self._store_segments(w, end)
            for record in [t for t in self._times if t["sample"] < end]:
                w.add_segment_time(record)
            self._times = [t for t in self._times if t["sample"] >= end]
            w.attrs["sample_rate"] = (
                w.attrs.get("sample_rate") or self.attrs.get("sample_rate") or rate
            )
            if final:
                for ev in self._events:
                    w.add_events(ev)
            # The stream's record so far replaces the one the last commit stored.
            w.attrs["sources"] = self._base_sources + list(records)
            w.commit()
        except BaseException:
            w.abort()
            raise
        self._rows, self._buffered, self._stored = [], 0, end
        self.commits += 1

    def _store_segments(self, w: StoreWriter, end: int) -> None:
        """Committed recordings stay sorted and contiguous: closed ones as they are, the running one
        as [frontier, end), which the next commit extends."""
        ready = [s for s in self._segments if s[1] <= end]
        self._segments = [s for s in self._segments if s[1] > end]
        for a, b in ready:
            if self._open is not None and a == self._open:
                w.extend_last_segment(a, b)
            else:
                w.add_segment(a, b)
            self._open, self._frontier = None, b
        if end > self._frontier:
            if self._open == self._frontier:
                w.extend_last_segment(self._frontier, end)
            else:
                w.add_segment(self._frontier, end)
            self._open = self._frontier

    def abort(self) -> None:
        """Drop what was not committed; earlier commits stay."""
        if self._w is not None:
            self._w.abort()
            self._w = None
        self._rows, self._buffered = [], 0

    def __enter__(self) -> LiveWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None or not self._done:
            self.abort()
