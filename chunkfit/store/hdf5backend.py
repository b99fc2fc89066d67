"""An HDF5 store (``.h5``/``.hdf5``): one file, written through a guard that keeps libhdf5 from ever
seeing a failed write."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from ..errors import StoreFormatError
from .backend import Backend
from .layout import ATTR_KEY, DIMENSIONS


class Hdf5Backend(Backend):
    kind = "hdf5"

    def __init__(self, path: Path, writable: bool, create: bool = False) -> None:
        super().__init__(path, writable)
        import h5py

        self._guard: GuardedFile | None = None
        self._closed = False
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
        if self._closed:
            return
        try:
            self.file.close()
        finally:
            if self._guard is not None:
                self._guard.close()
        self._closed = True


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
