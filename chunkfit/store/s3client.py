"""Every request to object storage, through obstore (Rust's ``object_store``): chunkfit's own, and
zarr's through zarr's ``ObjectStore`` over the same client (``Remote.zarr_store``).

Why obstore rather than s3fs: an ingest is CPU-bound, and every CPU second the client spends is one
the parser does not get. s3fs costs CPU to import and to make its botocore client (every command
that opened a store paid it), and each upload goes through Python's HTTP stack (aiohttp, botocore's
signing, its checksums); obstore signs and sends in Rust threads without the GIL and imports at
once. One client also means one configuration (retries, timeouts, credentials) and one kind of
failure to word. xarray and dask open the same stores through s3fs (``remote.storage_options``).

Configuration is the standard one, read from the environment: ``AWS_ENDPOINT_URL`` (or
``AWS_ENDPOINT_URL_S3``), ``AWS_REGION``/``AWS_DEFAULT_REGION``, and credentials from
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``. Without keys in the
environment, credentials come from botocore's chain (``AWS_PROFILE`` and the shared files, SSO, web
identity, containers, instance metadata), imported only then. ``CHUNKFIT_S3_ANON=1`` sends requests
unsigned. Secrets are passed to the client, never written anywhere.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

_stores: dict[tuple[str, tuple[str | None, ...]], Any] = {}
_lock = threading.Lock()


def endpoint() -> str | None:
    """The S3-compatible endpoint from the environment; None for AWS itself."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def anonymous() -> bool:
    return os.environ.get("CHUNKFIT_S3_ANON") == "1"


def retries() -> int:
    return int(os.environ.get("CHUNKFIT_S3_RETRIES", "4"))


def bucket_store(bucket: str) -> Any:
    """The obstore ``S3Store`` of ``bucket`` (with its own connection pool), made once per process
    and environment: a process that points the AWS variables elsewhere gets a new one."""
    seen = tuple(os.environ.get(k) for k in _SETTINGS)
    with _lock:
        store = _stores.get((bucket, seen))
        if store is None:
            store = _stores[(bucket, seen)] = _make(bucket)
        return store


_SETTINGS = (
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "CHUNKFIT_S3_ANON",
    "CHUNKFIT_S3_RETRIES",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
)


def require_obstore(url: str) -> None:
    """Refuse an ``s3://`` path at once, in one line naming the extra, when obstore is missing."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        from ..errors import MissingExtraError

        raise MissingExtraError(
            f"{url}: s3:// paths need the obstore package; install it with "
            "pip install 'chunkfit[s3]'"
        ) from None


def _make(bucket: str) -> Any:
    require_obstore(f"s3://{bucket}")
    from obstore.store import S3Store

    url = endpoint()
    config: Any = {}  # obstore's S3Config, ClientConfig and RetryConfig are TypedDicts
    provider: Any = None
    if url:
        config["endpoint"] = url
    if anonymous():
        config["skip_signature"] = True
    elif not (os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")):
        provider = _BotocoreCredentials(f"s3://{bucket}")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region and provider is not None:
        region = provider.region()
    config["region"] = region or bucket_region(bucket, url)
    retry: Any = {
        "max_retries": retries(),
        "backoff": {
            "init_backoff": timedelta(milliseconds=100),
            "max_backoff": timedelta(seconds=2),
            "base": 2,
        },
        "retry_timeout": timedelta(seconds=60),
    }
    client: Any = {
        "connect_timeout": timedelta(seconds=3),
        "timeout": timedelta(seconds=30),
        "allow_http": bool(url and url.startswith("http://")),
    }
    return S3Store(
        bucket,
        config=config,
        client_options=client,
        retry_config=retry,
        credential_provider=provider,
    )


def bucket_region(bucket: str, url: str | None) -> str:
    """The region that holds ``bucket``, from the ``x-amz-bucket-region`` header of an unsigned
    HEAD of it (what S3 answers even to a request it refuses); ``us-east-1`` where none is said.
    Asked once per client (``bucket_store`` keeps it)."""
    where = f"{url.rstrip('/')}/{bucket}" if url else f"https://{bucket}.s3.amazonaws.com"
    region = None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(where, method="HEAD"), timeout=10
        ) as reply:
            region = reply.headers.get("x-amz-bucket-region")
    except urllib.error.HTTPError as err:
        region = err.headers.get("x-amz-bucket-region")
    except OSError:
        pass  # unreachable: the request that follows says so, in chunkfit's words
    return region or "us-east-1"


class NoCredentialsError(Exception):
    """No credentials in the environment nor anywhere botocore looks (``s3errors.translate``
    words it)."""


class _BotocoreCredentials:
    """obstore's credential callback over botocore's chain, for credentials that are not in the
    environment (profiles, SSO, web identity, containers, instance metadata)."""

    def __init__(self, url: str) -> None:
        import botocore.session

        self.session = botocore.session.get_session()
        self.found = self.session.get_credentials()
        if self.found is None:
            raise NoCredentialsError(url)

    def region(self) -> str | None:
        return self.session.get_config_variable("region")

    def __call__(self) -> dict[str, Any]:
        frozen = self.found.get_frozen_credentials()  # refreshed by botocore when they expire
        refreshable = hasattr(self.found, "refresh_needed")
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(UTC) + timedelta(minutes=5) if refreshable else None,
        }


def no_bucket(err: BaseException) -> bool:
    """Whether ``err`` says the bucket itself does not exist (not only the key)."""
    return "NoSuchBucket" in str(err)


def kind(err: BaseException) -> str | None:
    """What an obstore failure means: ``denied``, ``unreachable`` (after the retries), or None."""
    if type(err).__module__.split(".")[0] != "obstore":
        return None
    found = re.search(r"status code: (\d{3})", str(err))
    status = int(found.group(1)) if found else None
    if type(err).__name__ in {"PermissionDeniedError", "UnauthenticatedError"} or status in (
        401,
        403,
    ):
        return "denied"
    if type(err).__name__ == "GenericError" and (status is None or status >= 500):
        # No answer (refused, cut short, timed out) or a failing server, after the retries.
        return "unreachable"
    return None


def cause(err: BaseException) -> str:
    """A few words on why a request failed, from obstore's message (its first line's last
    clause)."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    tail = first.rsplit(" - ", 1)[-1].strip()
    return tail.removeprefix("HTTP error: ")[:80] or type(err).__name__


def delete_if_match(store: Any, key: str, etag: str) -> bool:
    """Delete ``key`` only while its ETag is ``etag`` (If-Match); False when it is not, or is gone.

    object_store has no conditional delete, so the request is a presigned DELETE sent here with the
    header (S3 and its compatibles check If-Match on DELETE)."""
    import obstore

    url = obstore.sign(store, "DELETE", key, timedelta(minutes=5))
    request = urllib.request.Request(url, method="DELETE", headers={"If-Match": etag})
    try:
        with urllib.request.urlopen(request, timeout=30):
            return True
    except urllib.error.HTTPError as err:
        if err.code in (404, 412):
            return False
        raise
