"""Stores on object storage (``s3://bucket/prefix.zarr``): the objects of one store, and its lease.

Object stores have no rename, so a store's transaction is committed by one small object written
last: the root ``zarr.json``, whose ``chunkfit`` attribute holds the committed length of every array
(``committed``). Readers clip every array to it; chunks past it are an unfinished write's and are
never read. A new store is invisible until its root ``zarr.json`` exists. One writer at a time holds
the store's lease object (``.chunkfit-lease``), made by a conditional put (``If-None-Match: *``), renewed
while it writes, and taken over only when it expired or its process on this host is gone.

Credentials and endpoint come the standard way (AWS environment variables and profiles,
``AWS_ENDPOINT_URL``); ``CHUNKFIT_S3_ANON=1`` (the CLI's ``--anon``) reads public buckets unsigned.
Every request goes through one obstore client per bucket (``s3client``: why obstore): chunkfit's
own (documents, chunk uploads, the lease, listings) and zarr's, through zarr's own ``ObjectStore``
over that client. xarray and dask open the same stores through s3fs (``storage_options``).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from .._fs import pid_alive
from ..errors import ChunkfitError, ReadOnlyError, RemoteError, StoreBusyError, StoreNotFoundError
from . import s3client

SCHEME = "s3://"
LEASE = ".chunkfit-lease"
ROOT = "zarr.json"
DEPTH = 2  # batches of chunk objects in flight at once (the objects of each sent concurrently)
BACKLOG = 16  # batches held while the writer's lease is being taken: parsing goes on
SENDERS = 16  # threads sending objects (each waits on its request in obstore, without the GIL)
T = TypeVar("T")


def is_remote(path: object) -> bool:
    """Whether ``path`` names a store or run on object storage (``s3://``)."""
    return isinstance(path, str) and path.startswith(SCHEME)


class Url(str):
    """An ``s3://`` location where chunkfit otherwise holds a ``Path``: ``str()`` is the URL."""

    def resolve(self) -> Url:
        return self

    def __truediv__(self, other: str) -> Url:
        return Url(self.rstrip("/") + "/" + other)

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]


def storage_options() -> dict[str, Any]:
    """s3fs options for opening chunkfit's stores with xarray or dask (``storage_options=``): the
    endpoint, ``--anon`` and retries chunkfit uses; no secrets, as botocore finds the credentials.

    ``max_concurrency`` 1: with more, s3fs asks for each whole object's size (a HEAD) before its GET,
    to split objects over 50 MB into ranged reads; chunk objects are a few MB, so every chunk read
    paid a second round trip for nothing."""
    opts: dict[str, Any] = {
        "anon": s3client.anonymous(),
        "max_concurrency": 1,
        "config_kwargs": {
            "connect_timeout": 3,
            "read_timeout": 30,
            "retries": {"max_attempts": s3client.retries(), "mode": "standard"},
        },
    }
    endpoint = s3client.endpoint()
    if endpoint:
        opts["endpoint_url"] = endpoint
    return opts


_senders: Any = None  # the thread pool that sends objects (``put_many``)
_senders_made = threading.Lock()


def _endpoint() -> str:
    return s3client.endpoint() or "AWS S3"


def translate(url: str, err: BaseException, kept: str) -> BaseException:
    """An object-storage failure as one line naming the URL and what was kept;
    other errors as they are."""
    text = " ".join(str(err).split())
    bucket = url[len(SCHEME) :].split("/", 1)[0]
    meaning = s3client.kind(err)
    if s3client.no_bucket(err):
        return StoreNotFoundError(
            f"{url}: bucket {bucket!r} does not exist at {_endpoint()}; create it or check the URL"
        )
    if type(err).__name__ in {"NoCredentialsError", "PartialCredentialsError"}:
        return ReadOnlyError(
            f"{url}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            f"or pass --anon for a public bucket ({kept})"
        )
    if meaning == "denied" or isinstance(err, PermissionError):
        return ReadOnlyError(
            f"{url}: access denied by {_endpoint()}; check the credentials (AWS_PROFILE or AWS_ACCESS_KEY_ID) "
            f"and the bucket policy ({kept})"
        )
    if meaning == "unreachable":
        why = s3client.cause(err)
    elif isinstance(err, (ConnectionError, TimeoutError)) or (
        isinstance(err, OSError) and "connect" in text.lower()
    ):
        why = type(err).__name__  # the conditional DELETE, sent by urllib
    else:
        return err
    return RemoteError(
        f"{url}: the endpoint {_endpoint()} cannot be reached after retries ({why}); {kept}"
    )


def guarded(url: str, kept: str, call: Callable[[], T]) -> T:
    """Run ``call``; an object-storage failure becomes the one-line error of ``translate``."""
    try:
        return call()
    except ChunkfitError:
        raise
    except Exception as err:
        out = translate(url, err, kept)
        if out is err:
            raise
        raise out from None


def commit_stamp(root: bytes | None) -> tuple[int, ...] | None:
    """What tells one commit of a store on object storage from another: a hash of its root
    ``zarr.json`` (the commit point, rewritten by every commit); None where there is no root."""
    return None if root is None else (hash(root),)


class Remote:
    """The objects under one ``s3://`` prefix, addressed by keys relative to it."""

    def __init__(self, url: str) -> None:
        self.url = Url(url.rstrip("/"))
        self.root = self.url[len(SCHEME) :]
        self.bucket, _, self.prefix = self.root.partition("/")
        self._pool: Any = None
        self._inflight: list[Any] = []
        self.gate: Any = (
            None  # a Future: batches sent by ``put_behind`` wait for it (the writer's lease)
        )
        self.bounded = True  # ``put_behind`` keeps at most ``DEPTH`` batches in flight

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
        if (
            failures
        ):  # raised once none is still in flight, so what a failure's cleanup deletes stays deleted
            raise failures[0]

    def put_behind(self, objects: dict[str, bytes]) -> None:
        """``put_many`` in a background thread, so the caller encodes the next chunks meanwhile; up to
        ``DEPTH`` batches in flight (``BACKLOG`` while ``gate`` is still closed), the caller waiting on
        the oldest beyond that; any number once ``bounded`` is False (a commit's last batches, whose rows
        are in memory already, and its documents: sent together, not each after the one before). A
        failure is raised by a later ``put_behind`` or by ``settle``."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(
                max_workers=BACKLOG + 1, thread_name_prefix="chunkfit-upload"
            )
            self._inflight = []
        while self.bounded and len(self._inflight) >= (
            BACKLOG if self.gate is not None and not self.gate.done() else DEPTH
        ):
            self._inflight.pop(0).result()
        self._inflight.append(self._pool.submit(self._put_after_gate, objects))

    def _put_after_gate(self, objects: dict[str, bytes]) -> None:
        if self.gate is not None:
            self.gate.result()  # its failure fails the batch, unsent
        self.put_many(objects)

    def settle(self) -> None:
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
        """A conditional put: only while no object has the key (``etag`` None) or while the object is
        still the one with ``etag``. The new ETag, or None when the condition did not hold."""
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

    def _listing(self, rel: str = "") -> list[dict[str, Any]]:
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
    """Download the objects ``names`` (those that exist) into folder ``local``; returns their names."""
    got = []
    local.mkdir(parents=True, exist_ok=True)
    for name in names:
        data = remote.get(name)
        if data is not None:
            (local / name).write_bytes(data)
            got.append(name)
    return got


class Lease:
    """The one writer of a store on object storage, as an object that expires unless renewed.

    Every write of the lease is conditional, so that of two processes only one can hold it: it is
    created only where none exists (If-None-Match), a stale one is taken over only while it is still
    the object that was found stale (If-Match on its ETag), and it is renewed and deleted only while
    it is still the holder's own (If-Match on the ETag of its last write). A holder whose lease was
    taken over (it went unrenewed past its expiry) finds out at its next renewal, and ``confirm``
    refuses to let it commit.
    """

    def __init__(
        self,
        remote: Remote,
        seconds: float | None = None,
        doing: str = "writing this store",
        busy: type[Exception] = StoreBusyError,
    ) -> None:
        self.remote = remote
        self.doing, self.busy = doing, busy
        self.seconds = float(
            seconds if seconds is not None else os.environ.get("CHUNKFIT_LEASE_SECONDS", "60")
        )
        self.owner = uuid.uuid4().hex
        self.etag: str | None = None  # of this holder's last write of the lease
        self.lost = False  # another process took the lease over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writing = threading.Lock()

    def _body(self) -> bytes:
        return json.dumps(
            {
                "owner": self.owner,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "expires": time.time() + self.seconds,
            }
        ).encode()

    def holder(self) -> dict[str, Any] | None:
        """The live lease's record, or None when there is none or it is stale."""
        raw = self.remote.get(LEASE)
        return None if raw is None else self._live(raw)

    def _live(self, raw: bytes) -> dict[str, Any] | None:
        try:
            rec = json.loads(raw)
            expired = float(rec["expires"]) < time.time()
            gone = rec.get("host") == socket.gethostname() and not pid_alive(int(rec["pid"]))
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: a write cut short, not a writer
        return None if expired or gone else rec

    def acquire(self) -> None:
        """Take the lease, or raise ``StoreBusyError`` naming the writer that holds it."""
        for _ in range(3):
            tag = self.remote.put_if(LEASE, self._body())
            if tag is None:
                found = self.remote.get_tagged(LEASE)
                if found is None:
                    continue  # released meanwhile: try to create it again
                raw, etag = found
                rec = self._live(raw)
                if rec is not None:
                    left = max(0, round(float(rec["expires"]) - time.time()))
                    raise self.busy(
                        f"{self.remote.url}: another process (pid {rec.get('pid')} on {rec.get('host')}) is "
                        f"{self.doing}; run the command again when it has finished (its lease expires in {left} s)"
                    )
                tag = self.remote.put_if(
                    LEASE, self._body(), etag=etag
                )  # stale: of its takers, one wins
            if tag is not None:
                self.etag = tag
                self._thread = threading.Thread(
                    target=self._renew, name="chunkfit-lease", daemon=True
                )
                self._thread.start()
                return
        raise self.busy(f"{self.remote.url}: the lease keeps changing hands; run the command again")

    def renew(self) -> None:
        """Extend the lease, if it is still this holder's (else mark it ``lost``)."""
        with self._writing:
            if self.lost or self.etag is None:
                return
            tag = self.remote.put_if(LEASE, self._body(), etag=self.etag)
            if tag is None:
                self.lost = True
            else:
                self.etag = tag

    def confirm(self) -> None:
        """Renew now, before a commit; refuse the commit if another process took the lease over."""
        self.renew()
        if self.lost:
            raise self.busy(
                f"{self.remote.url}: this process's lease expired unrenewed and another process took it over, "
                "so nothing was committed; run the command again"
            )

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                self.renew()
            except Exception:  # noqa: BLE001 - the endpoint may be away a moment; the next renewal tries again
                pass

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._writing:
            try:
                if self.etag is not None and not self.lost:
                    self.remote.delete_if(LEASE, self.etag)
            except Exception:  # noqa: BLE001 - an undeleted lease expires by itself
                pass
            self.etag = None
