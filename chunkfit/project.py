"""Where a command finds its store when none is named: ``chunkfit.toml`` or ``./sensor.zarr``.

A project file ``chunkfit.toml`` in the current directory may name the store::

    store = "recordings/site-a.zarr"   # relative to the file's directory
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from .errors import UsageError

PROJECT_FILE = "chunkfit.toml"
DEFAULT_STORE = "sensor.zarr"


def default_store(cwd: Path | None = None) -> Path:
    """The store named by ``chunkfit.toml`` in ``cwd``, else ``cwd/sensor.zarr`` when it exists."""
    here = Path.cwd() if cwd is None else cwd
    project = here / PROJECT_FILE
    if project.is_file():
        try:
            config = tomllib.loads(project.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise UsageError(f"{project}: not valid TOML ({err})") from None
        store = config.get("store")
        if not isinstance(store, str) or not store:
            raise UsageError(
                f'{project}: needs a line store = "PATH" naming the store (found {store!r})'
            )
        return here / store
    if (here / DEFAULT_STORE).exists():
        return here / DEFAULT_STORE
    raise UsageError(
        f"no STORE given, and the current directory has neither {PROJECT_FILE} nor "
        f"{DEFAULT_STORE}; name the store: chunkfit train STORE"
    )
