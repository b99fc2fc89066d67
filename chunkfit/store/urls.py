"""Where a store or run lives on object storage: ``s3://bucket/prefix`` addresses."""

from __future__ import annotations

SCHEME = "s3://"


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
