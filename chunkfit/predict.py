"""``chunkfit predict``: one score per window start, aligned to sample index, for any store.

The scores array has one float32 per sample: ``scores[s]`` is the event-class probability of the
window starting at sample ``s``, NaN where no window starts (segment ends, between strided starts).
It is written block by block (bounded memory) under a temporary name and renamed when complete.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .detect import Detection, RunMerger
from .errors import RunError, StoreExistsError
from .scoring import check_store, load_run, score_store
from .store import Store, open_store
from .store.layout import suffix_backend


@dataclasses.dataclass(frozen=True)
class PredictReport:
    scores: str
    windows: int
    detections: int
    events_out: str | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _claim(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise StoreExistsError(f"{path}: already exists; pass --overwrite to replace it")
    if path.exists() and path.is_dir() and not path.name.endswith(".zarr"):
        raise RunError(f"{path}: is a directory; choose a file name")
    if not path.parent.exists():
        raise RunError(f"{path.parent}: the output folder does not exist")
    if not os.access(path.parent, os.W_OK):
        raise RunError(f"{path.parent}: the output folder is not writable")


class _ScoreWriter:
    def __init__(self, path: Path, n: int, attrs: dict[str, Any]) -> None:
        self.kind = suffix_backend(str(path))
        self.tmp = path.parent / f".{path.name}.chunkfit-tmp-{os.getpid()}"
        chunk = 1 << 18
        if self.kind == "zarr":
            import zarr

            group = zarr.open_group(str(self.tmp), mode="w", zarr_format=3)
            group.attrs["chunkfit_scores"] = attrs
            self.arr: Any = group.create_array(
                "scores", shape=(n,), chunks=(min(chunk, max(n, 1)),), dtype="float32",
                fill_value=float("nan"), dimension_names=["time"],
            )
            self.file = None
        else:
            import h5py
            import json

            self.file = h5py.File(self.tmp, "w")
            self.file.attrs["chunkfit_scores"] = json.dumps(attrs)
            self.arr = self.file.create_dataset(
                "scores", shape=(n,), dtype="float32", chunks=(min(chunk, max(n, 1)),),
                fillvalue=np.nan, compression="lzf",
            )

    def write(self, a: int, values: np.ndarray) -> None:
        self.arr[a : a + values.size] = values

    def commit(self, path: Path) -> None:
        if self.file is not None:
            self.file.close()
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        os.replace(self.tmp, path)

    def abort(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.tmp.exists():
            shutil.rmtree(self.tmp) if self.tmp.is_dir() else self.tmp.unlink()


def predict(
    run: str | os.PathLike[str],
    store: str | os.PathLike[str] | Store,
    out: str | os.PathLike[str],
    *,
    events_out: str | os.PathLike[str] | None = None,
    threshold: float = 0.5,
    overwrite: bool = False,
    chunk: int = 200_000,
    batch_size: int = 1024,
    unsafe: bool = False,
) -> PredictReport:
    """Score every window of ``store``; write scores to ``out`` (.zarr or .h5) and detections to CSV."""
    out_path = Path(out)
    _claim(out_path, overwrite)
    ev_path = Path(events_out) if events_out is not None else None
    if ev_path is not None:
        _claim(ev_path, overwrite)
    model, spec = load_run(run, unsafe=unsafe)
    own = not isinstance(store, Store)
    s = open_store(store) if own else store  # type: ignore[arg-type]
    writer: _ScoreWriter | None = None
    tmp_events = ev_path.parent / f".{ev_path.name}.chunkfit-tmp-{os.getpid()}" if ev_path else None
    try:
        check_store(spec, s)
        w = spec.windows
        attrs = {"run": str(run), "window": w.window, "stride": w.stride, "class": spec.classes[spec.positive],
                 "threshold": threshold, "store": str(s.path)}
        writer = _ScoreWriter(out_path, s.n_samples, attrs)
        merger = RunMerger(w.window, w.stride, threshold)
        rate = s.sample_rate
        n_windows = n_det = 0
        handle = open(tmp_events, "w", newline="") if tmp_events else None
        try:
            rows = csv.writer(handle) if handle else None
            if rows is not None:
                rows.writerow(["start", "end", "peak_score", "peak_sample"] + (["start_s", "end_s"] if rate else []))

            def emit(dets: list[Detection]) -> None:
                nonlocal n_det
                for d in dets:
                    n_det += 1
                    if rows is not None:
                        extra = [f"{d.start / rate:.6f}", f"{d.end / rate:.6f}"] if rate else []
                        rows.writerow([d.start, d.end, f"{d.peak_score:.6f}", d.peak_start, *extra])

            for sb in score_stream(model, s, spec, chunk, batch_size):
                score = sb.probs[:, spec.positive]
                n_windows += score.size
                span = np.full(int(sb.starts[-1] - sb.starts[0]) + 1, np.nan, dtype=np.float32)
                span[sb.starts - sb.starts[0]] = score
                writer.write(int(sb.starts[0]), span)
                emit(merger.push(sb.starts, score, sb.segment))
            emit(merger.flush())
        finally:
            if handle is not None:
                handle.close()
        writer.commit(out_path)
        writer = None
        if tmp_events is not None and ev_path is not None:
            os.replace(tmp_events, ev_path)
        return PredictReport(str(out_path), n_windows, n_det, str(ev_path) if ev_path else None)
    except BaseException:
        if writer is not None:
            writer.abort()
        if tmp_events is not None and tmp_events.exists():
            tmp_events.unlink()
        raise
    finally:
        if own:
            s.close()


def score_stream(model: Any, store: Store, spec: Any, chunk: int, batch_size: int) -> Any:
    return score_store(model, store, spec, chunk=chunk, batch_size=batch_size)
