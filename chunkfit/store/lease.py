"""The lease of a store (or run) on object storage: one writer at a time, as an object that expires.

The lease object (``.chunkfit-lease``) is made by a conditional put (``If-None-Match: *``), renewed
while its holder writes, and taken over only when it expired or its process on this host is gone.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from .._fs import pid_alive
from ..errors import StoreBusyError
from .remote import Remote

LEASE = ".chunkfit-lease"


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
                        f"{self.remote.url}: another process (pid {rec.get('pid')} on "
                        f"{rec.get('host')}) is {self.doing}; run the command again when it has "
                        f"finished (its lease expires in {left} s)"
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
                f"{self.remote.url}: this process's lease expired unrenewed and another process "
                "took it over, so nothing was committed; run the command again"
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
