"""A rollback journal that makes a zarr append all-or-nothing, even under ``kill -9``.

Before an append touches the store, the files it may rewrite (every ``zarr.json`` and the last
chunk of each array along time) are copied into ``.chunkfit-journal/`` and a manifest is written
atomically. Removing the manifest is the commit. Whoever opens a store that still holds a manifest
rolls it back first: the copies return and chunks past the old ends are deleted.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

JOURNAL = ".chunkfit-journal"
MANIFEST = "manifest.json"


def _array_shapes(root: Path) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for meta in sorted(root.glob("*/zarr.json")):
        doc = json.loads(meta.read_text())
        if doc.get("node_type") != "array":
            continue
        shape = list(doc["shape"])
        chunks = list(doc["chunk_grid"]["configuration"]["chunk_shape"])
        out[meta.parent.name] = {"shape": shape, "chunks": chunks}
    return out


def _last_chunk(info: dict[str, list[int]]) -> int:
    """Index along time of the last chunk holding data, or -1 for an empty array."""
    n, ct = info["shape"][0], info["chunks"][0]
    return (n - 1) // ct if n > 0 else -1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def begin(root: Path) -> None:
    """Record what an append may change; after this returns the store can always be rolled back."""
    journal = root / JOURNAL
    if journal.exists():
        shutil.rmtree(journal)
    files = journal / "files"
    files.mkdir(parents=True)
    shapes = _array_shapes(root)
    saved: list[str] = ["zarr.json"]
    for name in shapes:
        saved.append(f"{name}/zarr.json")
        last = _last_chunk(shapes[name])
        if last >= 0 and (root / name / "c" / str(last)).exists():
            saved.append(f"{name}/c/{last}")
    for rel in saved:
        src, dst = root / rel, files / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        elif src.exists():
            shutil.copy2(src, dst)
    manifest = {"arrays": shapes, "saved": saved}
    tmp = journal / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, journal / MANIFEST)
    _fsync_dir(journal)


def commit(root: Path) -> None:
    """Make the append permanent: the manifest's removal is the commit point."""
    journal = root / JOURNAL
    (journal / MANIFEST).unlink()
    _fsync_dir(journal)
    shutil.rmtree(journal, ignore_errors=True)


def pending(root: Path) -> bool:
    return (root / JOURNAL).exists()


def rollback(root: Path) -> None:
    """Return the store to its state before the interrupted append. Safe to run twice."""
    journal = root / JOURNAL
    manifest_path = journal / MANIFEST
    if not manifest_path.exists():
        # The append died before its journal was complete: it had not touched the store yet.
        shutil.rmtree(journal, ignore_errors=True)
        return
    manifest = json.loads(manifest_path.read_text())
    arrays: dict[str, dict[str, list[int]]] = manifest["arrays"]
    for child in root.iterdir():
        if child.is_dir() and child.name != JOURNAL and child.name not in arrays:
            if (child / "zarr.json").exists():
                shutil.rmtree(child)  # an array the failed append created
    for name, info in arrays.items():
        chunk_dir = root / name / "c"
        last = _last_chunk(info)
        if chunk_dir.exists():
            for entry in chunk_dir.iterdir():
                index = entry.name.split(".")[0]
                if entry.name.endswith(".partial") or (index.isdigit() and int(index) > last):
                    if entry.is_dir():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
    files = journal / "files"
    for rel in manifest["saved"]:
        src, dst = files / rel, root / rel
        if src.is_dir():
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst)
        elif src.exists():
            tmp = dst.with_name(dst.name + ".restore")
            shutil.copy2(src, tmp)
            os.replace(tmp, dst)
    for partial in root.rglob("*.partial"):
        partial.unlink(missing_ok=True)
    manifest_path.unlink()
    shutil.rmtree(journal, ignore_errors=True)
