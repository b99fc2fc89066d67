"""An existing zarr v3 store, local or on object storage, read through zarr; appends write whole
chunks themselves (``zarrwrite``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..errors import StoreFormatError
from .backend import Backend
from .layout import ATTR_KEY, DIMENSIONS
from .zarrwrite import chunk_encoder, encode_chunks, group_metadata, write_chunks

if TYPE_CHECKING:
    from .remote import Remote


class ZarrBackend(Backend):
    kind = "zarr"

    def __init__(
        self, path: Path, writable: bool, remote: Remote | None = None, root: bytes | None = None
    ) -> None:
        """``root``: on object storage, the root ``zarr.json`` as the caller just read it, so the
        group is made from it rather than fetched again (a round trip), and is the very commit it
        read."""
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
                self.group = group_from_root(where, root, consolidated=not writable)
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
                    f"{self.path}: not a valid chunkfit store: {name}/zarr.json cannot be read "
                    f"({node})"
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

        committed = group_from_root(self._where, self._root, consolidated=True)._async_group

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

    def wait_for_writes(self) -> None:
        if self.remote is not None:
            try:
                self.remote.wait_for_writes()
            except Exception:  # noqa: BLE001 - this only waits; the failure was or will be reported
                pass
        wait_for_zarr_writes()

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
        """Where the array's last, partial chunk begins, and its rows as known here (None if not
        read)."""
        length, step = self.length(name), int(self.array(name).chunks[0])
        return (length // step) * step, self._tails.get(name)

    def rows(self, name: str, start: int, stop: int) -> np.ndarray:
        if self.remote is not None and self.writable:
            first, tail = self._tail(name)
            if tail is not None and first <= start <= stop <= first + tail.shape[0]:
                return tail[start - first : stop - first]
        return super().rows(name, start, stop)

    def _write_remote(self, name: str, start: int, rows: np.ndarray, encoder: Any) -> None:
        """Rows from ``start`` on, which is at most the array's length: rows after ``start`` are
        replaced (a live stream's commit rewrites its last segment's end). The chunk ``start`` falls
        in is rewritten whole, from the rows before ``start`` in it (known here, or read once)."""
        arr = self.array(name)
        length = self.length(name)
        if start > length:
            raise ValueError(
                f"{name}: an append writes from the array's end ({length}) or before it, not at "
                f"{start}"
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


def group_from_root(where: Any, root: bytes, consolidated: bool) -> Any:
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


def wait_for_zarr_writes() -> None:
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
