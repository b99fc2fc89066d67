"""``chunkfit ingest --repair``: what a killed writer left behind, removed or cut back."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import StoreNotFoundError
from .lease import LEASE, Lease
from .reader import Store
from .remote import ROOT, Remote
from .replacecommit import clean_stale_temporaries
from .s3errors import guarded
from .urls import is_remote
from .zarrbackend import ZarrBackend


def repair(path: str | os.PathLike[str]) -> str:
    """Remove an unfinished ingest's objects, or cut an interrupted append back to what was
    committed; returns what was done, in one line. Refused while another process writes the
    store."""
    if not is_remote(path):
        return _repair_local(Path(path))
    remote = Remote(str(path))
    return guarded(remote.url, "nothing was changed", lambda: _repair_remote(remote))


def _repair_remote(remote: Remote) -> str:
    lease = Lease(remote)
    lease.acquire()
    try:
        if remote.get(ROOT) is None:
            left = [k for k in remote.keys() if k != LEASE]
            if not left:
                raise StoreNotFoundError(
                    f"{remote.url}: no store and no objects there; nothing to repair"
                )
            remote.delete(left)
            return (
                f"{remote.url}: removed {len(left)} object(s) of an unfinished ingest; no store "
                "was there"
            )
        with Store(remote.url) as s:
            committed = dict(s.committed or {})
        b = ZarrBackend(Path("."), writable=True, remote=remote)
        cut = []
        for name in b.names():
            arr = b.array(name)
            if name in committed and arr.shape[0] != committed[name]:
                arr.resize((committed[name], *arr.shape[1:]))
                cut.append(name)
        what = f"cut {', '.join(cut)} back to the committed length" if cut else "nothing to repair"
        return f"{remote.url}: {what}; {committed.get('signal', 0):,} samples committed"
    finally:
        lease.release()


def _repair_local(path: Path) -> str:
    clean_stale_temporaries(path)  # a killed new ingest's temporary
    with Store(path) as s:  # opening rolls an interrupted append back
        return f"{path}: {s.n_samples:,} samples committed; no unfinished write is left"
