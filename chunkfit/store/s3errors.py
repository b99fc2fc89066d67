"""Object-storage failures as one line the user can act on: the URL, what went wrong, what was
kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import ChunkfitError, ReadOnlyError, RemoteError, StoreNotFoundError
from . import s3client
from .urls import SCHEME

T = TypeVar("T")


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
            f"{url}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY, or pass --anon for a public bucket ({kept})"
        )
    if meaning == "denied" or isinstance(err, PermissionError):
        return ReadOnlyError(
            f"{url}: access denied by {_endpoint()}; check the credentials (AWS_PROFILE or "
            f"AWS_ACCESS_KEY_ID) and the bucket policy ({kept})"
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
