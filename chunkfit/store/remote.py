"""Stores on object storage (``s3://bucket/prefix.zarr``): the objects of one store.

Object stores have no rename, so a store's transaction is committed by one small object written
last: the root ``zarr.json``, whose ``chunkfit`` attribute holds the committed length of every array
(``committed``). Readers clip every array to it; chunks past it are an unfinished write's and are
never read. A new store is invisible until its root ``zarr.json`` exists. One writer at a time holds
the store's lease (``lease``).

Credentials and endpoint come the standard way (AWS environment variables and profiles,
``AWS_ENDPOINT_URL``); ``CHUNKFIT_S3_ANON=1`` (the CLI's ``--anon``) reads public buckets unsigned.
Every request goes through one obstore client per bucket (``s3client``: why obstore): chunkfit's
own (documents, chunk uploads, the lease, listings) and zarr's, through zarr's own ``ObjectStore``
over that client. xarray and dask open the same stores through s3fs (``storage_options``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from . import s3client
from .urls import SCHEME, Url

ROOT = "zarr.json"
DEPTH = 2  # batches of chunk objects in flight at once (the objects of each sent concurrently)
BACKLOG = 16  # batches held while the writer's lease is being taken: parsing goes on
SENDERS = 16  # threads sending objects (each waits on its request in obstore, without the GIL)

_senders: Any = None  # the thread pool that sends objects (``put_many``)
_senders_made = threading.Lock()


def storage_options() -> dict[str, Any]:
    """s3fs options for opening chunkfit's stores with xarray or dask (``storage_options=``): the
    endpoint, ``--anon`` and retries chunkfit uses; no secrets, as botocore finds the credentials.

    ``max_concurrency`` 1: with more, s3fs asks for each whole object's size (a HEAD) before its
    GET, to split objects over 50 MB into ranged reads; chunk objects are a few MB, so every chunk
    read would pay a second round trip for nothing."""
    opts: dict[str, Any] = {
        "anon": s3client.anonymous(),
        "max_concurrency": 1,
        "config_kwargs": {
            "connect_timeout": 3,
            "read_timeout": 30,
            "retries": {"max_attempts": s3client.retries(), "mode": "standard"},
        },
    }
    url = s3client.endpoint()
    if url:
        opts["endpoint_url"] = url
    return opts


def commit_stamp(root: bytes | None) -> tuple[int, ...] | None:
    """What tells one commit of a store on object storage from another: a hash of its root
    ``zarr.json`` (the commit point, rewritten by every commit); None where there is no root."""
    return None if root is None else (hash(root),)


class Remote:
    """The objects under one ``s3://`` prefix, addressed by keys relative to it."""

    def __init__(self, url: str) -> None:
        s3client.require_obstore(url)
        self.url = Url(url.rstrip("/"))
        self.root = self.url[len(SCHEME) :]
        self.bucket, _, self.prefix = self.root.partition("/")
        self._pool: Any = None
        self._inflight: list[Future[None]] = []
        self._gate: Future[None] | None = None  # batches sent by ``put_behind`` wait for it
        self._bounded = True  # ``put_behind`` keeps at most ``DEPTH`` batches in flight

    def hold_uploads_until(self, gate: Future[None]) -> None:
        """Batches sent by ``put_behind`` from now on wait for ``gate`` (the writer's lease being
        taken), up to ``BACKLOG`` of them; its failure fails them, unsent."""
        self._gate = gate

    def send_all_at_once(self) -> None:
        """From now on ``put_behind`` waits for no batch before sending the next: a commit's last
        batches, whose rows are in memory already, and its documents go together, not each after the
        one before."""
        self._bounded = False

    @property
    def store(self) -> Any:
        """The bucket's obstore client, which sends chunkfit's own requests."""
        return s3client.bucket_store(self.bucket)

    def key(self, rel: str) -> str:
        """The object's key in its bucket."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def get(self, rel: str) -> bytes | None:
        """The object's bytes, or None when there is none: one GET."""
        found = self.get_tagged(rel)
        return None if found is None else found[0]

    def put(self, rel: str, data: bytes) -> None:
        import obstore

        obstore.put(self.store, self.key(rel), data, use_multipart=False)

    def put_many(self, objects: dict[str, bytes]) -> None:
        """Write the objects concurrently (one thread each, up to ``SENDERS``); a failure is raised
        once every object of the batch is sent or has failed."""
        global _senders
        if not objects:
            return
        with _senders_made:
            if _senders is None:
                from concurrent.futures import ThreadPoolExecutor

                _senders = ThreadPoolExecutor(
                    max_workers=SENDERS, thread_name_prefix="chunkfit-send"
                )
        sent = [_senders.submit(self.put, k, v) for k, v in objects.items()]
        failures = [err for err in (done.exception() for done in sent) if err is not None]
        # Raised once none is still in flight, so what a failure's cleanup deletes stays deleted.
        if failures:
            raise failures[0]

    def put_behind(self, objects: dict[str, bytes]) -> None:
        """``put_many`` in a background thread, so the caller encodes the next chunks meanwhile.

        Up to ``DEPTH`` batches are in flight (``BACKLOG`` while the gate of
        ``hold_uploads_until`` is still closed), the caller waiting on the oldest beyond that; any
        number after ``send_all_at_once``. A failure is raised by a later ``put_behind`` or by
        ``wait_for_writes``."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(
                max_workers=BACKLOG + 1, thread_name_prefix="chunkfit-upload"
            )
            self._inflight = []
        gate = self._gate
        while self._bounded and len(self._inflight) >= (
            BACKLOG if gate is not None and not gate.done() else DEPTH
        ):
            self._inflight.pop(0).result()
        self._inflight.append(self._pool.submit(self._put_after_gate, objects))

    def _put_after_gate(self, objects: dict[str, bytes]) -> None:
        if self._gate is not None:
            self._gate.result()  # its failure fails the batch, unsent
        self.put_many(objects)

    def wait_for_writes(self) -> None:
        """Wait for every batch ``put_behind`` sent; raise the first failure."""
        inflight, self._inflight = self._inflight or [], []
        failure: BaseException | None = None
        for future in inflight:
            try:
                future.result()
            except BaseException as err:  # noqa: BLE001 - the first is raised once all are done
                failure = failure or err
        if failure is not None:
            raise failure

    def get_tagged(self, rel: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, from one response (so the two belong together), or None."""
        import obstore

        try:
            found = obstore.get(self.store, self.key(rel))
            return bytes(found.bytes()), str(found.meta["e_tag"])
        except FileNotFoundError as err:
            if s3client.no_bucket(err):
                raise
            return None

    def put_if(self, rel: str, data: bytes, etag: str | None = None) -> str | None:
        """A conditional put: only while no object has the key (``etag`` None) or while the object
        is still the one with ``etag``. The new ETag, or None when the condition did not hold."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        mode: Any = "create" if etag is None else {"e_tag": etag}
        try:
            reply = obstore.put(self.store, self.key(rel), data, mode=mode, use_multipart=False)
        except (AlreadyExistsError, PreconditionError):
            return None
        return str(reply["e_tag"])

    def delete_if(self, rel: str, etag: str) -> bool:
        """Delete the object only while it is the one with ``etag``; False when it is not."""
        return s3client.delete_if_match(self.store, self.key(rel), etag)

    def _listing(self, rel: str = "") -> list[Any]:
        import obstore

        base = self.key(rel).rstrip("/")
        return [
            meta
            for batch in obstore.list(self.store, base + "/" if base else None)
            for meta in batch
        ]

    def keys(self, rel: str = "") -> list[str]:
        """Keys under ``rel`` (relative to the prefix), listed fresh."""
        start = len(self.prefix) + 1 if self.prefix else 0
        return [str(meta["path"])[start:] for meta in self._listing(rel)]

    def delete(self, keys: Iterable[str]) -> None:
        import obstore

        paths = [self.key(k) for k in keys]
        if paths:
            obstore.delete(self.store, paths)

    def clear(self, keep: str | None = None) -> None:
        """Delete every object under the prefix but ``keep``."""
        self.delete([k for k in self.keys() if k != keep])

    def size(self) -> int:
        return sum(int(meta["size"]) for meta in self._listing())

    def zarr_store(self, read_only: bool) -> Any:
        """Where zarr reads (and an append resizes) the arrays: zarr's own ``ObjectStore`` over this
        bucket's obstore client, the one chunkfit's own requests go through."""
        from zarr.storage import ObjectStore, StorePath

        return StorePath(ObjectStore(self.store, read_only=read_only), self.prefix)


def upload_tree(local: Path, remote: Remote) -> None:
    """Upload the zarr folder ``local`` to ``remote``, its root ``zarr.json`` last (the commit)."""
    files = {str(p.relative_to(local)): p for p in local.rglob("*") if p.is_file()}
    remote.put_many({k: p.read_bytes() for k, p in files.items() if k != ROOT})
    if ROOT in files:
        remote.put(ROOT, files[ROOT].read_bytes())


def fetch_files(remote: Remote, names: Iterable[str], local: Path) -> list[str]:
    """Download the objects ``names`` (those that exist) into folder ``local``; returns their
    names."""
    got = []
    local.mkdir(parents=True, exist_ok=True)
    for name in names:
        data = remote.get(name)
        if data is not None:
            (local / name).write_bytes(data)
            got.append(name)
    return got
