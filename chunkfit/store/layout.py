"""The logical layout shared by both backends, and the checks a store must pass on open.

Arrays: ``signal`` float32 [time, channel]; ``labels`` int32 [time] (optional); ``events`` int64
[event] sorted sample indices; ``segments`` int64 [segment, 2] half-open ranges. Attributes live
under one key, ``chunkfit``, as a JSON object.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._fs import refuse_url
from ..errors import StoreFormatError, UsageError
from . import segtimes

FORMAT_VERSION = 1
ATTR_KEY = "chunkfit"
DIMENSIONS: dict[str, tuple[str, ...]] = {
    "signal": ("time", "channel"),
    "labels": ("time",),
    "events": ("event",),
    "segments": ("segment", "bound"),
}


def suffix_backend(path: str) -> str:
    """Return ``"zarr"`` or ``"hdf5"`` from a store path's suffix; ``.zarr`` is the default."""
    lower = str(path).rstrip("/").lower()
    if lower.endswith((".h5", ".hdf5")):
        return "hdf5"
    return "zarr"


def check_store_path(path: str) -> None:
    """Refuse a store path without a store suffix: the suffix picks the backend."""
    refuse_url(path, "stores", s3=True)
    lower = str(path).rstrip("/").lower()
    if not lower.endswith((".zarr", ".h5", ".hdf5")):
        raise UsageError(
            f"{path}: a store path ends in .zarr (zarr directory) or .h5/.hdf5 (HDF5 file); "
            "rename it"
        )


def empty_stats(channels: list[str]) -> dict[str, dict[str, float]]:
    return {
        c: {"count": 0, "mean": 0.0, "std": 0.0, "min": math.inf, "max": -math.inf}
        for c in channels
    }


def merge_stats(stats: dict[str, dict[str, float]], channels: list[str], block: np.ndarray) -> None:
    """Fold one block [rows, channel] into running per-channel stats (Chan et al. parallel merge).

    The block is transposed once so each channel's reductions run over contiguous memory; a
    channel whose min or max is not finite holds NaN or Inf and is folded from its finite values.
    """
    if block.shape[0] == 0:
        return
    by_channel = np.ascontiguousarray(block.T)
    lows, highs = by_channel.min(axis=1), by_channel.max(axis=1)
    for j, name in enumerate(channels):
        col = by_channel[j]
        if not (np.isfinite(lows[j]) and np.isfinite(highs[j])):
            col = col[np.isfinite(col)]
            if col.size == 0:
                continue
            low, high = float(col.min()), float(col.max())
        else:
            low, high = float(lows[j]), float(highs[j])
        n_b = int(col.size)
        mean_b = float(col.sum(dtype=np.float64)) / n_b
        dev = col - np.float64(mean_b)  # float64 deviations: float32 ones lose ~1e-8 of the std
        m2_b = float(np.square(dev, out=dev).sum(dtype=np.float64))
        _fold(stats[name], n_b, mean_b, m2_b, low, high)


def _fold(
    s: dict[str, float], n_b: int, mean_b: float, m2_b: float, low: float, high: float
) -> None:
    n_a = int(s["count"])
    m2_a = float(s["std"]) ** 2 * n_a
    n = n_a + n_b
    delta = mean_b - float(s["mean"])
    s["mean"] = float(s["mean"]) + delta * n_b / n
    s["std"] = math.sqrt(max(m2_a + m2_b + delta * delta * n_a * n_b / n, 0.0) / n)
    s["count"] = n
    s["min"] = min(float(s["min"]), low)
    s["max"] = max(float(s["max"]), high)


def json_safe_stats(stats: dict[str, dict[str, float]]) -> dict[str, dict[str, float | None]]:
    """Infinite min/max of an all-NaN channel become None so the attributes stay valid JSON."""
    return {
        c: {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in s.items()}
        for c, s in stats.items()
    }


def restore_stats(stats: dict[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for c, s in stats.items():
        out[c] = {
            "count": int(s["count"]),
            "mean": float(s["mean"]),
            "std": float(s["std"]),
            "min": math.inf if s["min"] is None else float(s["min"]),
            "max": -math.inf if s["max"] is None else float(s["max"]),
        }
    return out


def validate(
    where: str, attrs: Any, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str]
) -> None:
    """Refuse a store whose attributes and arrays disagree; ``where`` names the store in
    messages."""

    def bad(what: str) -> StoreFormatError:
        return StoreFormatError(f"{where}: not a valid chunkfit store: {what}")

    if not isinstance(attrs, dict):
        raise bad(f"attribute '{ATTR_KEY}' is missing; create the store with `chunkfit ingest`")
    version = attrs.get("format_version")
    if version != FORMAT_VERSION:
        raise bad(f"format_version is {version!r}, this chunkfit reads {FORMAT_VERSION}")
    channels = attrs.get("channels")
    if (
        not isinstance(channels, list)
        or not channels
        or not all(isinstance(c, str) for c in channels)
    ):
        raise bad(f"attribute channels must be a non-empty list of names (found {channels!r})")
    rate = attrs.get("sample_rate")
    if rate is not None and (not _is_number(rate) or not rate > 0 or not math.isfinite(rate)):
        raise bad(f"sample_rate must be a positive number or null (found {_short(rate)})")
    _validate_extras(bad, attrs)
    if "signal" not in shapes:
        raise bad("array 'signal' is missing")
    sig = shapes["signal"]
    if len(sig) != 2 or sig[1] != len(channels):
        raise bad(f"signal shape {sig} does not match {len(channels)} channel name(s)")
    if dtypes["signal"] != "float32":
        raise bad(f"signal dtype is {dtypes['signal']}, expected float32")
    seg = shapes.get("segments")
    if seg is None or len(seg) != 2 or seg[1] != 2:
        raise bad(f"segments must have shape [segment, 2] (found {seg})")
    if dtypes["segments"] != "int64":
        raise bad(f"segments dtype is {dtypes['segments']}, expected int64")
    ev = shapes.get("events")
    if ev is not None and (len(ev) != 1 or dtypes["events"] != "int64"):
        raise bad(f"events must be a 1-D int64 array (found shape {ev}, dtype {dtypes['events']})")
    lab = shapes.get("labels")
    if lab is not None and (lab != (sig[0],) or not dtypes["labels"].startswith("int")):
        raise bad(f"labels must be integers of shape ({sig[0]},) (found {lab}, {dtypes['labels']})")


def committed_lengths(
    where: str, attrs: Any, shapes: dict[str, tuple[int, ...]]
) -> dict[str, int] | None:
    """The committed length of each array (stores on object storage), or None for a local store.

    Arrays may hold rows past it (an append cut short); never fewer.
    """
    committed = attrs.get("committed") if isinstance(attrs, dict) else None
    if committed is None:
        return None
    if not isinstance(committed, dict) or not all(_is_count(committed.get(n)) for n in shapes):
        raise StoreFormatError(
            f"{where}: not a valid chunkfit store: attribute committed must give every array's "
            "length"
        )
    for name, shape in shapes.items():
        if shape[0] < committed[name]:
            raise StoreFormatError(
                f"{where}: not a valid chunkfit store: array '{name}' holds {shape[0]} rows, "
                f"fewer than the {committed[name]} committed; the store is damaged: re-ingest the "
                "source"
            )
    return {n: int(committed[n]) for n in shapes}


def committed_last_segment(where: str, attrs: Any) -> tuple[int, int] | None:
    """The last segment as committed (stores on object storage), or None where the attributes give
    none.

    A live stream's commit extends the store's last segment, rewriting that row in its chunk object
    before the root commits it; a reader that opened the store at the previous commit must not take
    the new end for the old one, so the root holds the committed row (``committed.last_segment``,
    beside the committed lengths), and readers take it from there.
    """
    committed = attrs.get("committed") if isinstance(attrs, dict) else None
    last = committed.get("last_segment") if isinstance(committed, dict) else None
    if last is None:
        return None
    if not (
        isinstance(last, list)
        and len(last) == 2
        and all(_is_count(v) for v in last)
        and last[0] < last[1]
    ):
        raise StoreFormatError(
            f"{where}: not a valid chunkfit store: attribute committed.last_segment must be "
            f"[start, stop], not {_short(last)}"
        )
    return int(last[0]), int(last[1])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _validate_extras(bad: Any, attrs: dict[str, Any]) -> None:
    """The attributes ``info``, appends and evaluation read besides channels and rate."""
    stats = attrs.get("stats", {})
    if not isinstance(stats, dict):
        raise bad(
            f"attribute stats must map channel names to their statistics (found {_short(stats)})"
        )
    for name, st in stats.items():
        ok = (
            isinstance(st, dict)
            and _is_count(st.get("count"))
            and all(_is_number(st.get(k)) for k in ("mean", "std"))
            and all(st.get(k) is None or _is_number(st.get(k)) for k in ("min", "max"))
        )
        if not ok:
            raise bad(
                f"stats of channel {name!r} must hold a count and numbers mean, std, min, max "
                f"(found {_short(st)})"
            )
    sources = attrs.get("sources", [])
    if not isinstance(sources, list) or not all(
        isinstance(r, dict) and isinstance(r.get("name"), str) for r in sources
    ):
        raise bad(
            f"attribute sources must be a list of records with a name (found {_short(sources)})"
        )
    has_events = attrs.get("has_events", False)
    if not isinstance(has_events, bool):
        raise bad(f"has_events must be true or false (found {_short(has_events)})")
    classes = attrs.get("label_classes", [])
    if not isinstance(classes, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) for c in classes
    ):
        raise bad(f"label_classes must be a list of integers (found {_short(classes)})")
    if attrs.get(segtimes.KEY) is not None:
        segtimes.check(bad, attrs[segtimes.KEY])
    counts = attrs.get("label_counts", {})
    if not isinstance(counts, dict) or not all(
        k.lstrip("-").isdigit() and _is_count(v) for k, v in counts.items()
    ):
        raise bad(f"label_counts must map classes to sample counts (found {_short(counts)})")


def validate_segments(where: str, segments: np.ndarray, n_samples: int) -> None:
    """Segments must be sorted, non-empty, non-overlapping and inside [0, n_samples)."""
    if segments.size == 0:
        if n_samples:
            raise StoreFormatError(
                f"{where}: not a valid chunkfit store: no segments but {n_samples} samples"
            )
        return
    starts, stops = segments[:, 0], segments[:, 1]
    if (starts < 0).any() or (stops > n_samples).any() or (stops <= starts).any():
        raise StoreFormatError(
            f"{where}: not a valid chunkfit store: segments out of range [0, {n_samples}) or empty"
        )
    if (starts[1:] < stops[:-1]).any():
        raise StoreFormatError(
            f"{where}: not a valid chunkfit store: segments overlap or are unsorted"
        )


def validate_events(where: str, events: np.ndarray, n_samples: int) -> None:
    if events.size and (events[0] < 0 or events[-1] >= n_samples or (np.diff(events) < 0).any()):
        raise StoreFormatError(
            f"{where}: not a valid chunkfit store: events must be sorted sample indices in "
            f"[0, {n_samples})"
        )
