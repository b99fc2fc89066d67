"""The chunk files (or objects) of a zarr store's arrays: which are missing, which cannot be
decoded."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from ..errors import StoreFormatError
from .remote import Remote
from .s3errors import guarded


class ChunkFiles:
    """Looks up the chunks of one open store: files in its folder, or objects listed once per array
    on object storage (again only for a chunk not seen in the last listing)."""

    def __init__(self, path: Path, remote: Remote | None) -> None:
        self.path = path
        self.remote = remote
        self._listed: dict[str, set[str]] = {}

    def check(self, arr: Any, name: str, a: int, b: int, n_samples: int) -> None:
        """Refuse samples [a, b) of zarr array ``arr`` (``name``) when a chunk of them is missing
        (zarr would return zeros for it)."""
        step = int(arr.chunks[0])
        # Every chunk along the other axes too: a 2-D signal's chunk keys are c/<time>/<channel>.
        across = [
            range(-(-int(n) // int(c))) for n, c in zip(arr.shape[1:], arr.chunks[1:], strict=True)
        ]
        for i in range(a // step, (b - 1) // step + 1):
            for rest in itertools.product(*across):
                key = arr.metadata.encode_chunk_key((i, *rest))
                if not self.exists(name, key):
                    span = f"samples [{i * step}, {min((i + 1) * step, n_samples)})"
                    raise StoreFormatError(
                        f"{self.path}: chunk {name}/{key} ({span}) is missing; the store is "
                        "damaged: re-ingest the source"
                    )

    def exists(self, name: str, key: str) -> bool:
        """Whether chunk ``key`` of array ``name`` is stored."""
        if self.remote is None:
            return (self.path / name / key).is_file()
        full = f"{name}/{key}"
        listed = self._listed.get(name)
        if listed is None or full not in listed:  # listed once, again only for a chunk not seen yet
            remote = self.remote
            listed = self._listed[name] = set(
                guarded(remote.url, "the store is unchanged", lambda: remote.keys(name))
            )
        return full in listed

    def damaged(
        self, arr: Any, name: str, a: int, b: int, err: Exception, n_samples: int, zarr: bool
    ) -> StoreFormatError:
        """The error for samples [a, b) of ``arr`` that could not be read: it names the first chunk
        that cannot be decoded (read one by one, only on failure)."""
        step = int(arr.chunks[0]) if getattr(arr, "chunks", None) else max(b - a, 1)
        what = f"{name} samples [{a}, {b})"
        for i in range(a // step, (b - 1) // step + 1):
            lo, hi = max(a, i * step), min(b, (i + 1) * step)
            try:
                arr[lo:hi]
            except Exception as first:  # noqa: BLE001 - zarr/numcodecs/h5py raise many types
                err = first
                key = arr.metadata.encode_chunk_key((i,) + (0,) * (arr.ndim - 1)) if zarr else None
                span = f"samples [{i * step}, {min((i + 1) * step, n_samples)})"
                what = f"chunk {name}/{key} ({span})" if key is not None else f"{name} {span}"
                break
        detail = " ".join(f"{type(err).__name__}: {err}".split())[:200]
        return StoreFormatError(
            f"{self.path}: {what} cannot be read ({detail}); the store is damaged: re-ingest the "
            "source"
        )
