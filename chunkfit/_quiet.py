"""Import TensorFlow without its start-up chatter on stderr (oneDNN and CPU-feature notices).

TensorFlow 2.21 writes these from C++ before any logging setting applies, so the only way to keep
a CLI's stderr to the one line a user needs is to point file descriptor 2 elsewhere meanwhile.
``install()`` does that lazily: TensorFlow is still imported only when a command first needs it.
Set ``TF_CPP_MIN_LOG_LEVEL=0`` to see the notices.

Some notices come later, from the first training step, and at ERROR level: on a Zen 4 EPYC,
TensorFlow 2.21 logs ``E0000 ... oneDNN supports DT_INT32 only on platforms with AVX-512`` (on a CPU
that has AVX-512) and trains on. So the level chunkfit sets where none is set, ``QUIET_LOG_LEVEL``,
hides ERROR lines too; failures that matter reach chunkfit as exceptions and still get their line.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

QUIET_LOG_LEVEL = (
    "3"  # TF_CPP_MIN_LOG_LEVEL where none is set: TensorFlow's INFO, WARNING and ERROR logs hidden
)


class Silenced:
    """File descriptor ``fd`` (2: stderr, 1: stdout) points to /dev/null meanwhile: for C libraries
    that print instead of raising (TensorFlow's notices, edflib's file-size complaints)."""

    def __init__(self, fd: int = 2) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        (sys.stdout if self.fd == 1 else sys.stderr).flush()
        self.saved = os.dup(self.fd)
        self.devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(self.devnull, self.fd)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self.saved, self.fd)
        os.close(self.saved)
        os.close(self.devnull)


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Wraps the first ``import tensorflow`` (and its first op) in a silenced stderr.

    ``setup`` runs between the import and that first op, while the runtime can still be configured.
    """

    def __init__(self) -> None:
        self.setup: list[Callable[[ModuleType], None]] = []
        self._looking = False

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        # A look-up alone (importlib.util.find_spec: is TensorFlow installed?) imports nothing, so
        # the finder stays in place until the module is really executed.
        if name != "tensorflow" or self._looking:
            return None
        self._looking = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking = False
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            with Silenced():
                run(module)
                for setup in self.setup:
                    setup(module)
                module.constant(0.0) + 1.0  # the CPU-feature notice comes with the first op

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Silence TensorFlow's start-up notices whenever it is first imported in this process."""
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL) in (
        "0",
        "1",
    ):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL)
    if not any(isinstance(f, _QuietFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietFinder())


def import_tensorflow_quietly(setup: Callable[[ModuleType], None] | None = None) -> None:
    """Import TensorFlow silently; ``setup(tensorflow)`` runs before its runtime starts when this
    import is the first (else it is not called)."""
    install()
    if setup is not None and "tensorflow" not in sys.modules:
        finder = next((f for f in sys.meta_path if isinstance(f, _QuietFinder)), None)
        if finder is None:  # notices wanted (TF_CPP_MIN_LOG_LEVEL=0/1): plain import, no op yet
            import tensorflow

            setup(tensorflow)
            return
        finder.setup.append(setup)
    import tensorflow  # noqa: F401
