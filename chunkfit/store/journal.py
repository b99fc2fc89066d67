"""A rollback journal that makes a zarr append all-or-nothing, even under ``kill -9``.

Before an append touches the store, the files it may rewrite (every ``zarr.json`` and the last
chunk of each array along time) are copied into ``.chunkfit-journal/`` and a manifest is written
atomically. Removing the manifest is the commit. Whoever opens a store that still holds a journal
whose writer is gone rolls it back first: the copies return and chunks past the old ends are
deleted. A journal whose writer is still running belongs to an append in progress: it is left alone.
The journal appears (by a rename) already naming its writer, and leaves by a rename too, so nobody
ever finds one half made or half removed and takes it for a dead writer's.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from .._fs import fsync_dir, pid_alive
from ..errors import StoreBusyError

JOURNAL = ".chunkfit-journal"
MANIFEST = "manifest.json"
OWNER = "owner"
ASIDE = ".aside"  # suffix of a journal being set up or being removed, under its writer's pid


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


def writer(root: Path) -> int | None:
    """Pid of the live process that owns the store's journal, or None when there is none."""
    try:
        text = (root / JOURNAL / OWNER).read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    # This very process counts too: a reader here must not roll back its own append in progress.
    return pid if pid == os.getpid() or pid_alive(pid) else None


def busy_error(root: Path, pid: int) -> StoreBusyError:
    return StoreBusyError(
        f"{root}: process {pid} is appending to this store right now; "
        "wait until it finishes (or stop it) and run the command again"
    )


def begin(root: Path) -> None:
    """Record what an append may change; after this returns the store can always be rolled back."""
    journal = root / JOURNAL
    _claim(root, journal)
    try:
        _record(root, journal)
    except BaseException:
        # The store is untouched until the manifest exists: dropping the journal undoes it all.
        _remove(root, journal)
        raise


def _claim(root: Path, journal: Path) -> None:
    """Make the journal appear with its owner already named: built under a name of this process's
    own and renamed into place, so a reader never finds a journal it cannot tell from a dead
    writer's (which it would roll back) and two appends never share one (the rename fails if it
    exists)."""
    for stale in root.glob(f"{JOURNAL}.*{ASIDE}"):
        owner = stale.name[len(JOURNAL) + 1 : -len(ASIDE)]
        if owner.isdigit() and int(owner) != os.getpid() and not pid_alive(int(owner)):
            shutil.rmtree(stale, ignore_errors=True)
    staged = _aside(root)
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    (staged / OWNER).write_text(str(os.getpid()))
    try:
        for _ in range(3):
            try:
                os.rename(staged, journal)
                return
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
            pid = writer(root)
            if pid is not None:
                raise busy_error(root, pid)
            rollback(root)
        raise busy_error(root, writer(root) or 0)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise


def _record(root: Path, journal: Path) -> None:
    files = journal / "files"
    files.mkdir()
    shapes = _array_shapes(root)
    saved: list[str] = ["zarr.json"]
    for name in shapes:
        saved.append(f"{name}/zarr.json")
        last = _last_chunk(shapes[name])
        # A chunk zarr never wrote (all fill value) is absent: rollback then deletes it instead.
        if last >= 0 and (root / name / "c" / str(last)).exists():
            saved.append(f"{name}/c/{last}")
    for rel in saved:
        src, dst = root / rel, files / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            _copy_tree(src, dst)
        elif src.exists():
            shutil.copy2(src, dst)
    manifest = {"arrays": shapes, "saved": saved, "pid": os.getpid()}
    tmp = journal / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, journal / MANIFEST)
    fsync_dir(journal)


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy a folder file by file, so a full disk raises the OSError itself (copytree bundles
    it)."""
    dst.mkdir(parents=True, exist_ok=True)
    for item in sorted(src.rglob("*")):
        target = dst / item.relative_to(src)
        if item.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            shutil.copy2(item, target)


def commit(root: Path) -> None:
    """Make the append permanent: the manifest's removal is the commit point."""
    journal = root / JOURNAL
    (journal / MANIFEST).unlink()
    fsync_dir(journal)
    _remove(root, journal)


def _remove(root: Path, journal: Path) -> None:
    """Drop this process's journal: out of sight at once, so a reader never finds it half
    deleted."""
    gone = _aside(root)
    shutil.rmtree(gone, ignore_errors=True)
    try:
        os.rename(journal, gone)
    except FileNotFoundError:
        return
    shutil.rmtree(gone, ignore_errors=True)


def _aside(root: Path) -> Path:
    return root / f"{JOURNAL}.{os.getpid()}{ASIDE}"


def pending(root: Path) -> bool:
    return (root / JOURNAL).exists()


def rollback(root: Path) -> None:
    """Return the store to its state before the interrupted append. Safe to run twice.

    Only for a journal whose writer is gone (see ``writer``) or for the writer itself.
    """
    journal = root / JOURNAL
    manifest_path = journal / MANIFEST
    if not manifest_path.exists():
        # The append died before its journal was complete: it had not touched the store yet.
        shutil.rmtree(journal, ignore_errors=True)
        return
    manifest = json.loads(manifest_path.read_text())
    arrays: dict[str, dict[str, list[int]]] = manifest["arrays"]
    saved = set(manifest["saved"])
    for child in root.iterdir():
        if child.is_dir() and child.name != JOURNAL and child.name not in arrays:
            if (child / "zarr.json").exists():
                shutil.rmtree(child)  # an array the failed append created
    for name, info in arrays.items():
        chunk_dir = root / name / "c"
        last = _last_chunk(info)
        if f"{name}/c/{last}" not in saved:
            last -= 1  # the old last chunk did not exist, so it must not exist afterwards either
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
    for leftover in [*root.rglob("*.partial"), *root.rglob("*.restore")]:
        leftover.unlink(missing_ok=True)
    manifest_path.unlink()
    shutil.rmtree(journal, ignore_errors=True)
