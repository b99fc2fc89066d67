"""Zarr v3 and HDF5 behind one small interface: named arrays plus one JSON attribute."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..errors import StoreFormatError
from .layout import ATTR_KEY, DIMENSIONS
from .zarrwrite import (
    array_metadata,
    chunk_encoder,
    encode_chunks,
    group_metadata,
    write_chunks,
    write_document,
)

if TYPE_CHECKING:
    from .remote import Remote


class Backend:
    """Arrays (zarr.Array or h5py.Dataset: both slice, resize and expose shape/dtype) and attrs."""

    kind = ""

    def __init__(self, path: Path, writable: bool) -> None:
        self.path = path
        self.writable = writable

    def names(self) -> list[str]:
        raise NotImplementedError

    def array(self, name: str) -> Any:
        raise NotImplementedError

    def attrs(self) -> Any:
        raise NotImplementedError

    def set_attrs(self, attrs: dict[str, Any]) -> None:
        raise NotImplementedError

    def create(
        self, name: str, shape: tuple[int, ...], dtype: str, chunks: tuple[int, ...], codec: str
    ) -> Any:
        raise NotImplementedError

    def codec_name(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def write_error(self) -> OSError | None:
        """The first write that failed (disk full, file size limit), when the backend held it back."""
        return None

    def settle(self) -> None:
        """Wait until no write started by this process is still running."""

    def commit_documents(self, attrs: dict[str, Any]) -> tuple[dict[str, bytes], bytes]:
        """On object storage: the array documents to store before the commit (keyed as objects), and
        the root ``zarr.json`` that commits them, holding ``attrs`` and every array's document at its
        committed shape (consolidated metadata: what zarr and xarray read)."""
        raise NotImplementedError

    def length(self, name: str) -> int:
        """Length of array ``name`` along its first axis."""
        return int(self.array(name).shape[0])

    def rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of array ``name``."""
        return np.asarray(self.array(name)[start:stop])

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        """Grow array ``name`` to ``start + len(rows)`` along time and write ``rows`` from ``start``."""
        arr = self.array(name)
        end = start + rows.shape[0]
        arr.resize((end,) + tuple(arr.shape[1:]))
        arr[start:end] = rows

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(int(s) for s in self.array(n).shape) for n in self.names()}

    def dtypes(self) -> dict[str, str]:
        return {n: str(np.dtype(self.array(n).dtype)) for n in self.names()}


class ZarrBackend(Backend):
    kind = "zarr"

    def __init__(
        self, path: Path, writable: bool, remote: Remote | None = None, root: bytes | None = None
    ) -> None:
        """``root``: on object storage, the root ``zarr.json`` as the caller just read it, so the group
        is made from it rather than fetched again (a round trip), and is the very commit it read."""
        super().__init__(path, writable)
        import zarr

        self.remote = remote
        mode: Literal["r+", "r"] = "r+" if writable else "r"
        where: Any = str(path) if remote is None else remote.zarr_store(read_only=not writable)
        self._where, self._root = where, root
        try:
            # A reader takes the arrays' shapes from the root document's consolidated metadata where
            # there is one (the committed ones); a writer reads each array's own document, which an
            # append cut short may have grown past them.
            if remote is not None and root is not None:
                self.group = _group_from_root(where, root, consolidated=not writable)
            else:
                self.group = zarr.open_group(
                    store=where,
                    mode=mode,
                    zarr_format=3,
                    use_consolidated=False if writable else None,
                )
        except PermissionError:
            raise  # the writer names the folder that cannot be written
        except (FileNotFoundError, zarr.errors.GroupNotFoundError) as err:  # type: ignore[attr-defined]
            raise StoreFormatError(
                f"{path}: not a zarr v3 group ({err}); create a store with `chunkfit ingest`"
            ) from None
        except (ValueError, TypeError, KeyError, json.JSONDecodeError) as err:
            raise StoreFormatError(f"{path}: cannot open as a zarr v3 store: {err}") from None
        self._arrays: dict[str, Any] = {}
        self._names: list[str] | None = None
        self._encoders: dict[str, Any] = {}
        self._lengths: dict[
            str, int
        ] = {}  # on object storage: each array's length as written so far
        self._tails: dict[str, np.ndarray] = {}  # and the rows of its last, partial chunk

    def names(self) -> list[str]:
        """The arrays there are, looked up once (this backend creates none): the documents of all of
        them at once, one round trip on object storage where there is no consolidated metadata."""
        if self._names is None:
            from zarr.core.sync import sync

            self._found(sync(self._lookup()))
        return list(self._names or [])

    async def _lookup(self) -> list[Any]:
        import asyncio

        group = self.group._async_group
        return await asyncio.gather(*(group.getitem(n) for n in DIMENSIONS), return_exceptions=True)

    def _found(self, nodes: list[Any]) -> None:
        import zarr

        found = []
        for name, node in zip(DIMENSIONS, nodes, strict=True):
            if isinstance(node, KeyError):
                continue
            if isinstance(node, (ValueError, TypeError)):  # json.JSONDecodeError is a ValueError
                raise StoreFormatError(
                    f"{self.path}: not a valid chunkfit store: {name}/zarr.json cannot be read ({node})"
                ) from None
            if isinstance(node, BaseException):
                raise node
            if isinstance(node, zarr.AsyncArray):
                found.append(name)
                self._arrays.setdefault(name, self._configured(zarr.Array(node)))
        self._names = sorted(found)

    def open_for_append(self) -> None:
        """On object storage, as an append begins (under its lease, from the root document it read):
        every array's own document and the committed rows of every array's last, partial chunk, all
        fetched at once. ``write_rows`` extends those rows, and ``rows`` answers from them, without
        reading them again: one round trip, where there were one for the documents and one per array
        written, one after another."""
        assert self.remote is not None and self._root is not None and self.writable
        import asyncio

        from zarr.core.sync import sync

        committed = _group_from_root(self._where, self._root, consolidated=True)._async_group

        async def tail(name: str) -> Any:
            try:  # the array as committed, from the root's consolidated metadata: no request
                arr = await committed.getitem(name)
            except KeyError:
                return None
            n, step = int(arr.shape[0]), int(arr.chunks[0])
            return await arr.getitem(slice((n // step) * step, n))

        async def both() -> tuple[list[Any], list[Any]]:
            return await asyncio.gather(
                self._lookup(), asyncio.gather(*(tail(n) for n in DIMENSIONS))
            )

        nodes, tails = sync(both())
        self._found(nodes)
        for name, rows in zip(DIMENSIONS, tails, strict=True):
            if rows is not None and name in self._arrays:
                self._tails[name] = np.asarray(rows)

    def array(self, name: str) -> Any:
        if name not in self._arrays:
            self._arrays[name] = self._configured(self.group[name])
        return self._arrays[name]

    def _configured(self, arr: Any) -> Any:
        if self.writable:
            # Every chunk is written, even all-zero ones, so a missing chunk file means damage
            # (zarr's default drops a chunk that holds only the fill value).
            arr = arr.with_config({"write_empty_chunks": True})
        return arr

    def attrs(self) -> Any:
        return self.group.attrs.get(ATTR_KEY)

    def set_attrs(self, attrs: dict[str, Any]) -> None:
        self.group.attrs[ATTR_KEY] = attrs

    def settle(self) -> None:
        if self.remote is not None:
            try:
                self.remote.settle()
            except Exception:  # noqa: BLE001 - settle only waits; the failure was or will be reported
                pass
        settle_zarr()

    def length(self, name: str) -> int:
        return self._lengths[name] if name in self._lengths else int(self.array(name).shape[0])

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        """As ``Backend.write_rows``, with whole chunks encoded and written by ``zarrwrite``: zarr's
        own path costs more CPU than the compression itself. A head that starts inside a chunk (the
        store's last chunk was partial) goes through zarr; on object storage that chunk is rewritten
        whole instead, and the array's document is left as it is until ``commit_documents``."""
        arr = self.array(name)
        if name not in self._encoders:
            self._encoders[name] = chunk_encoder(arr.metadata.to_dict())
        encoder = self._encoders[name]
        if encoder is None:
            return super().write_rows(name, start, rows)
        if self.remote is not None:
            return self._write_remote(name, start, rows, encoder)
        end = start + rows.shape[0]
        step = int(arr.chunks[0])
        head = min(end, -(-start // step) * step)
        arr.resize((end,) + tuple(arr.shape[1:]))
        if head > start:
            arr[start:head] = rows[: head - start]
        write_chunks(self.path / name, head // step, rows[head - start :], step, encoder)

    def _tail(self, name: str) -> tuple[int, np.ndarray | None]:
        """Where the array's last, partial chunk begins, and its rows as known here (None if not read)."""
        length, step = self.length(name), int(self.array(name).chunks[0])
        return (length // step) * step, self._tails.get(name)

    def rows(self, name: str, start: int, stop: int) -> np.ndarray:
        if self.remote is not None and self.writable:
            first, tail = self._tail(name)
            if tail is not None and first <= start <= stop <= first + tail.shape[0]:
                return tail[start - first : stop - first]
        return super().rows(name, start, stop)

    def _write_remote(self, name: str, start: int, rows: np.ndarray, encoder: Any) -> None:
        """Rows from ``start`` on, which is at most the array's length: rows after ``start`` are replaced
        (a live stream's commit rewrites its last segment's end). The chunk ``start`` falls in is
        rewritten whole, from the rows before ``start`` in it (known here, or read once)."""
        arr = self.array(name)
        length = self.length(name)
        if start > length:
            raise ValueError(
                f"{name}: an append writes from the array's end ({length}) or before it, not at {start}"
            )
        step = int(arr.chunks[0])
        first, tail = self._tail(name)
        begin = (start // step) * step
        if begin < first and name in self._lengths:
            raise ValueError(
                f"{name}: rows this transaction wrote before {first} cannot be rewritten"
            )
        if tail is not None and begin == first:
            head = tail[: start - first]
        else:  # the committed rows of that chunk before ``start``
            head = np.asarray(arr[begin:start])
        rows = (
            np.concatenate([head, rows.astype(head.dtype, copy=False)]) if head.shape[0] else rows
        )
        chunks = encode_chunks(begin // step, rows, step, encoder)
        assert self.remote is not None
        self.remote.put_behind({f"{name}/{k}": v for k, v in chunks.items()})
        keep = rows.shape[0] % step
        self._tails[name] = rows[rows.shape[0] - keep :].copy() if keep else rows[:0]
        self._lengths[name] = begin + rows.shape[0]

    def commit_documents(self, attrs: dict[str, Any]) -> tuple[dict[str, bytes], bytes]:
        from zarr.core.buffer import default_buffer_prototype

        metas, docs = {}, {}
        for name in self.names():
            arr = self.array(name)
            meta = json.loads(
                arr.metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes()
            )
            meta["shape"][0] = self.length(name)
            metas[name] = meta
            if self.length(name) != int(arr.shape[0]):
                docs[f"{name}/zarr.json"] = json.dumps(meta, indent=2).encode()
        group_attrs = {**self.group.attrs.asdict(), ATTR_KEY: attrs}
        return docs, json.dumps(group_metadata(group_attrs, metas), indent=2).encode()

    def codec_name(self) -> str:
        comps = getattr(self.array("signal"), "compressors", ())
        if not comps:
            return "none"
        c = comps[0]
        cname = getattr(c, "cname", None)
        return f"blosc-{getattr(cname, 'value', cname)}" if cname is not None else type(c).__name__


class Hdf5Backend(Backend):
    kind = "hdf5"

    def __init__(self, path: Path, writable: bool, create: bool = False) -> None:
        super().__init__(path, writable)
        import h5py

        self._guard: GuardedFile | None = None
        if writable:
            # Writable stores are always temporaries (a new store, or the copy an append works on).
            self._guard = GuardedFile(path, "x+b" if create else "r+b")
            try:
                self.file = h5py.File(self._guard, "w" if create else "r+")
            except BaseException:
                self._guard.close()
                raise
            return
        try:
            self.file = h5py.File(path, "r")
        except OSError as err:
            raise StoreFormatError(
                f"{path}: cannot open as an HDF5 file ({err}); it may be truncated or not HDF5"
            ) from None

    def names(self) -> list[str]:
        import h5py

        return sorted(n for n in DIMENSIONS if isinstance(self.file.get(n), h5py.Dataset))

    def array(self, name: str) -> Any:
        return self.file[name]

    def attrs(self) -> Any:
        raw = self.file.attrs.get(ATTR_KEY)
        if raw is None:
            return None
        try:
            return json.loads(raw if isinstance(raw, str) else bytes(raw).decode())
        except (ValueError, UnicodeDecodeError, TypeError):
            raise StoreFormatError(
                f"{self.path}: attribute '{ATTR_KEY}' is not valid JSON"
            ) from None

    def set_attrs(self, attrs: dict[str, Any]) -> None:
        self.file.attrs[ATTR_KEY] = json.dumps(attrs)

    def create(
        self, name: str, shape: tuple[int, ...], dtype: str, chunks: tuple[int, ...], codec: str
    ) -> Any:
        maxshape = (None,) + tuple(shape[1:])
        kwargs: dict[str, Any] = {}
        if codec != "none":
            kwargs = {"compression": "lzf", "shuffle": True}
        ds = self.file.create_dataset(
            name, shape=shape, maxshape=maxshape, dtype=dtype, chunks=chunks, **kwargs
        )
        ds.attrs["dimension_names"] = json.dumps(list(DIMENSIONS[name]))
        return ds

    def codec_name(self) -> str:
        ds = self.array("signal")
        return ("shuffle+" if ds.shuffle else "") + (ds.compression or "none")

    def write_error(self) -> OSError | None:
        return self._guard.error if self._guard is not None else None

    def close(self) -> None:
        try:
            self.file.close()
        finally:
            if self._guard is not None:
                self._guard.close()


class GuardedFile(io.RawIOBase):
    """The file under a writable HDF5 store: a failed write is remembered, not raised into HDF5.

    libhdf5 cannot recover from a failed write (disk full, file size limit): closing the file then
    fails again and may crash the process. So the first failure is kept for the writer to raise,
    later writes are dropped, and the half-written temporary is deleted by the writer's abort.
    """

    def __init__(self, path: Path, mode: str) -> None:
        super().__init__()
        self._raw = io.FileIO(path, mode.replace("b", ""))  # unbuffered; closed in close()
        self.error: OSError | None = None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._raw.readinto(buffer) or 0

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.error is None:
            try:
                done = 0
                while done < len(
                    view
                ):  # a write may stop short at a size limit; the next one fails
                    done += self._raw.write(view[done:]) or 0
            except OSError as err:
                self.error = err
        return len(view)

    def truncate(self, size: int | None = None) -> int:
        if self.error is None:
            try:
                return self._raw.truncate(size)
            except OSError as err:
                self.error = err
        return self.tell() if size is None else size

    def flush(self) -> None:
        pass  # unbuffered

    def close(self) -> None:
        if not self._raw.closed:
            self._raw.close()
        super().close()


def settle_zarr() -> None:
    """Wait until every zarr write this process started has finished.

    When one chunk write fails, zarr raises at once while its other chunk writes still run on
    zarr's event loop; a rollback or cleanup must not race them (a late one would recreate a file).
    """
    import asyncio

    from zarr.core.sync import sync

    async def others_done() -> None:
        me = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not me]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    sync(others_done())


class NewZarrBackend(Backend):
    """A new zarr store, written without zarr (see ``zarrwrite``): it only grows, from sample 0.

    The chunk files are written as rows arrive; the ``zarr.json`` documents, which hold the
    shapes and the attributes, are written by ``close``. The folder is a temporary that the
    writer renames into place only after that.
    """

    kind = "zarr"

    def __init__(self, path: Path, remote: Remote | None = None) -> None:
        super().__init__(path, writable=True)
        self.remote = remote
        if remote is None:
            path.mkdir()
        self._meta: dict[str, dict[str, Any]] = {}
        self._encoders: dict[str, Any] = {}
        self._tails: dict[str, np.ndarray] = {}  # rows of each array's last, partial chunk
        self._attrs: dict[str, Any] = {}

    def names(self) -> list[str]:
        return sorted(self._meta)

    def length(self, name: str) -> int:
        return int(self._meta[name]["shape"][0])

    def set_attrs(self, attrs: dict[str, Any]) -> None:
        self._attrs = {ATTR_KEY: attrs}

    def create(
        self, name: str, shape: tuple[int, ...], dtype: str, chunks: tuple[int, ...], codec: str
    ) -> Any:
        if shape[0] != 0:
            raise ValueError("a new array starts empty")
        meta = array_metadata(shape, dtype, chunks, codec, DIMENSIONS[name])
        self._meta[name] = meta
        self._encoders[name] = chunk_encoder(meta)
        self._tails[name] = np.zeros((0,) + tuple(shape[1:]), dtype=dtype)
        if self.remote is None:
            (self.path / name).mkdir()

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        meta = self._meta[name]
        if start != meta["shape"][0]:
            raise ValueError(
                f"{name}: a new array grows at its end ({meta['shape'][0]}), not at {start}"
            )
        step = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
        tail = self._tails[name]
        first = (start - tail.shape[0]) // step
        rows = (
            np.concatenate([tail, rows.astype(tail.dtype, copy=False)]) if tail.shape[0] else rows
        )
        if self.remote is not None:
            chunks = encode_chunks(first, rows, step, self._encoders[name])
            self.remote.put_behind({f"{name}/{k}": v for k, v in chunks.items()})
        else:
            write_chunks(self.path / name, first, rows, step, self._encoders[name])
        keep = rows.shape[0] % step
        self._tails[name] = rows[rows.shape[0] - keep :].copy() if keep else rows[:0]
        meta["shape"][0] = start + (rows.shape[0] - tail.shape[0])

    def settle(self) -> None:
        if self.remote is not None:
            try:
                self.remote.settle()
            except Exception:  # noqa: BLE001 - settle only waits; the failure was or will be reported
                pass

    def commit_documents(self, attrs: dict[str, Any]) -> tuple[dict[str, bytes], bytes]:
        docs = {f"{n}/zarr.json": json.dumps(m, indent=2).encode() for n, m in self._meta.items()}
        return docs, json.dumps(group_metadata({ATTR_KEY: attrs}, self._meta), indent=2).encode()

    def close(self) -> None:
        """Write the documents, the root ``zarr.json`` last. On object storage the writer stores
        ``commit_documents`` instead, so closing commits nothing there (an aborted store stays unseen)."""
        if self.remote is not None:
            return
        for name, meta in self._meta.items():
            write_document(self.path / name / "zarr.json", meta)
        write_document(self.path / "zarr.json", group_metadata(self._attrs))


def _group_from_root(where: Any, root: bytes, consolidated: bool) -> Any:
    """The zarr group at ``where`` (a ``StorePath``) whose root document is ``root``; a writer's
    without its consolidated metadata."""
    import zarr
    from zarr.core.group import AsyncGroup

    doc = json.loads(root)
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or doc.get("node_type") != "group":
        raise ValueError("its root zarr.json is not a zarr v3 group's")
    if not consolidated:
        doc.pop("consolidated_metadata", None)
    return zarr.Group(AsyncGroup.from_dict(where, doc))


def open_backend(
    path: Path,
    kind: str,
    writable: bool = False,
    create: bool = False,
    remote: Remote | None = None,
    root: bytes | None = None,
) -> Backend:
    if kind == "hdf5":
        return Hdf5Backend(path, writable, create)
    if create:
        return NewZarrBackend(path, remote)
    return ZarrBackend(path, writable, remote, root)
