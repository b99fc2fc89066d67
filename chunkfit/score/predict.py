"""``chunkfit predict``: one score per window start, aligned to sample index, for any store.

The scores array has one float32 per sample: ``scores[s]`` is the event-class probability of the
window starting at sample ``s``, NaN where no window starts (segment ends, between strided starts).
It is written block by block (bounded memory) under a temporary name and renamed when complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._fs import refuse_url
from ..config import event_span
from ..core.detect import RunMerger, gap_samples
from ..core.scoring import score_store
from ..core.timeline import Timeline
from ..errors import BusyError, ChunkfitError, StoreExistsError, UsageError
from ..store import Store, open_store
from ..store.layout import suffix_backend
from ..store.lease import LEASE, Lease
from ..store.remote import ROOT, Remote, upload_tree
from ..store.s3errors import guarded
from ..store.urls import is_remote
from .channels import ChannelsArg, mapped
from .loading import load_scorer
from .outputs import DetectionCsv, OutputLocks, ScoreWriter, check_outputs, write_failure
from .picks import predicted_picks, scored_windows
from .runs import (
    check_channels,
    check_settings,
    check_store,
    locate_run,
    run_threshold,
    score_attrs,
)


@dataclasses.dataclass(frozen=True)
class PredictReport:
    scores: str | None
    windows: int
    detections: int
    events_out: str | None
    threshold: float = 0.5
    threshold_source: str = ""
    channels: str | None = None  # how the store's channels were mapped to the run's, if they were
    exported: str | None = None  # what scored, for an exported model: "model.tflite (LiteRT int8)"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class EventRule:
    """How positive windows become events: ``merge_gap`` and ``min_duration`` in seconds."""

    merge_gap: float = 0.0
    min_duration: float = 0.0

    def __post_init__(self) -> None:
        gap_samples(self.merge_gap, 1.0, "--merge-gap")
        gap_samples(self.min_duration, 1.0, "--min-duration")

    def merger(
        self,
        window: int,
        stride: int,
        threshold: float,
        rate: float | None,
        region: tuple[int, int] | None = None,
    ) -> RunMerger:
        """The merger of a run's windows; ``region``: the part of a window whose marker made it
        positive in training (the label rule's, config.event_span), where its peak is placed."""
        return RunMerger(
            window,
            stride,
            threshold,
            region=region,
            merge_gap=gap_samples(self.merge_gap, rate, "--merge-gap"),
            min_duration=gap_samples(self.min_duration, rate, "--min-duration"),
        )


def predict(
    run: str | os.PathLike[str],
    store: str | os.PathLike[str] | Store,
    out: str | os.PathLike[str] | None = None,
    *,
    events_out: str | os.PathLike[str] | None = None,
    threshold: float | None = None,
    overwrite: bool = False,
    chunk: int = 200_000,
    batch_size: int = 1024,
    unsafe: bool = False,
    channels: ChannelsArg | None = None,
    progress: Callable[[int, int], None] | None = None,
    merge_gap: float = 0.0,
    min_duration: float = 0.0,
) -> PredictReport:
    """Score every window of ``store``; write scores to ``out`` (.zarr or .h5) and one row per
    detected event to the CSV ``events_out`` (either, or both).

    Positive windows whose spans overlap, touch or lie at most ``merge_gap`` seconds apart are one
    event; events shorter than ``min_duration`` seconds are dropped (chunkfit.core.detect).

    While it runs, this process holds the outputs' locks: a second predict writing the same output
    is refused (chunkfit.score.outputs). The detections use ``threshold``, else the one the run
    chose on its validation split, else 0.5. ``channels`` maps the store's channels to the run's
    (chunkfit.score.channels). ``progress(done, total)`` hears the windows scored so far.
    """
    check_settings(threshold=threshold, chunk=chunk, batch_size=batch_size, channels=channels)
    rule = EventRule(merge_gap, min_duration)
    if out is None and events_out is None:
        raise UsageError(
            "predict writes the scores (--out), the detections (--events-out) or both; give one"
        )
    if out is not None and is_remote(out):
        return _predict_to_remote(
            run,
            store,
            str(out),
            events_out=events_out,
            threshold=threshold,
            overwrite=overwrite,
            chunk=chunk,
            batch_size=batch_size,
            unsafe=unsafe,
            channels=channels,
            progress=progress,
            merge_gap=merge_gap,
            min_duration=min_duration,
        )
    out_path = Path(out) if out is not None else None
    ev_path = Path(events_out) if events_out is not None else None
    locks = OutputLocks(out_path, ev_path)
    try:
        check_outputs(out_path, ev_path, store, overwrite)
        locate_run(run, unsafe=unsafe)  # a wrong run or store is refused before TensorFlow loads
        locks.claim()
        opened = contextlib.nullcontext(store) if isinstance(store, Store) else open_store(store)
        with opened as s:
            return _predict(
                run,
                s,
                out_path,
                ev_path,
                threshold,
                chunk,
                batch_size,
                unsafe,
                channels,
                progress,
                rule,
            )
    finally:
        locks.release()


def _predict_to_remote(
    run: str | os.PathLike[str],
    store: str | os.PathLike[str] | Store,
    out: str,
    *,
    events_out: str | os.PathLike[str] | None,
    overwrite: bool,
    **settings: Any,
) -> PredictReport:
    """Scores written to object storage: made in a local staging folder, then uploaded with the root
    ``zarr.json`` last, so a reader sees the old scores, none, or the new ones whole (never a
    mix)."""
    if events_out is not None:
        refuse_url(events_out, "--events-out")
    if suffix_backend(out) != "zarr":
        raise UsageError(f"{out}: scores on object storage are a zarr store; end --out in .zarr")
    if str(store.path if isinstance(store, Store) else store).rstrip("/") == out.rstrip("/"):
        raise UsageError(f"{out}: is the store being scored; write the output elsewhere")
    remote = Remote(out)
    kept = "nothing was written"
    lease = Lease(remote, doing="writing these scores", busy=BusyError)
    guarded(remote.url, kept, lease.acquire)
    try:
        if not overwrite and guarded(remote.url, kept, lambda: remote.get(ROOT)) is not None:
            raise StoreExistsError(f"{out}: already exists; pass --overwrite to replace it")
        with tempfile.TemporaryDirectory(prefix="chunkfit-scores-") as stage:
            local = Path(stage) / remote.url.name
            report = predict(run, store, local, events_out=events_out, **settings)
            if overwrite:
                guarded(remote.url, kept, lambda: _remove_scores(remote))
            guarded(remote.url, "no scores were written there", lambda: upload_tree(local, remote))
        return dataclasses.replace(report, scores=out)
    finally:
        lease.release()


def _remove_scores(remote: Remote) -> None:
    """The old scores disappear first (their root document), then their chunks."""
    remote.delete([ROOT])
    remote.clear(keep=LEASE)


def _predict(
    run: str | os.PathLike[str],
    s: Store,
    out_path: Path | None,
    ev_path: Path | None,
    given: float | None,
    chunk: int,
    batch_size: int,
    unsafe: bool,
    channels: ChannelsArg | None,
    progress: Callable[[int, int], None] | None,
    rule: EventRule,
) -> PredictReport:
    writer: ScoreWriter | None = None
    tmp_events = ev_path.parent / f".{ev_path.name}.chunkfit-tmp-{os.getpid()}" if ev_path else None
    try:
        s.check_chunks()
        check_channels(run, s, channels, unsafe=unsafe)  # before TensorFlow loads
        scorer = load_scorer(run, unsafe=unsafe, batch_size=batch_size)
        spec = scorer.spec
        cmap = check_store(spec, s, channels)
        threshold, source = run_threshold(spec, given)
        source = scorer.threshold_source(threshold, source)
        w = spec.windows
        if out_path is not None:
            writer = ScoreWriter(out_path, s.n_samples, score_attrs(run, spec, threshold, s))
        merger = rule.merger(
            w.window, w.stride, threshold, s.sample_rate, event_span(w.label, w.window)
        )
        detections = DetectionCsv(tmp_events, Timeline.of(s))
        n_windows = 0
        try:
            predictor = mapped(scorer.predictor, cmap)
            width = scorer.width
            if width is not None:  # a dense picker: a score per sample, a detection per pick
                for lo, trace, found in predicted_picks(
                    predictor, s, spec, threshold, width, chunk=chunk
                ):
                    if writer is not None:
                        writer.write(lo, trace)
                    detections.write(found)
                n_windows = scored_windows(s, spec)
            else:
                for sb in score_store(predictor, s, w, chunk=chunk, progress=progress):
                    score = sb.probs[:, spec.positive]
                    n_windows += score.size
                    span = np.full(int(sb.starts[-1] - sb.starts[0]) + 1, np.nan, dtype=np.float32)
                    span[sb.starts - sb.starts[0]] = score
                    if writer is not None:
                        writer.write(int(sb.starts[0]), span)
                    detections.write(merger.push(sb.starts, score, sb.segment))
                detections.write(merger.flush())
        finally:
            detections.close()
        if writer is not None and out_path is not None:
            writer.commit(out_path)
        writer = None
        if tmp_events is not None and ev_path is not None:
            os.replace(tmp_events, ev_path)
        return PredictReport(
            str(out_path) if out_path is not None else None,
            n_windows,
            detections.count,
            str(ev_path) if ev_path else None,
            threshold,
            source,
            cmap.line,
            scorer.exported,
        )
    except BaseException as err:
        if writer is not None:
            writer.abort()
        if tmp_events is not None and tmp_events.exists():
            tmp_events.unlink()
        if isinstance(err, OSError) and not isinstance(err, ChunkfitError):
            raise write_failure(err, out_path or ev_path or Path(".")) from None
        raise
