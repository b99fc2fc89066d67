"""A Ctrl-C that native code turned into another error is still told as the interruption."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from chunkfit.cli import interrupt
from chunkfit.errors import Interrupted


@pytest.fixture
def watched() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT)
    interrupt.watch()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        interrupt._sigint.clear()


def _mangled() -> None:
    """What TensorFlow's ``map_fn`` did with a Ctrl-C: the ``KeyboardInterrupt`` comes out as a
    ``TypeError``."""
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        raise TypeError from None


def test_an_error_after_ctrl_c_is_the_interruption(watched: None) -> None:
    with pytest.raises(Interrupted, match="kept: nothing"):
        with interrupt.keeps(lambda: "kept: nothing"):
            _mangled()
    assert interrupt.interrupted()


def test_an_error_without_ctrl_c_keeps_its_traceback(watched: None) -> None:
    with pytest.raises(TypeError):
        with interrupt.keeps(lambda: "kept: nothing"):
            raise TypeError("a bug")
    assert not interrupt.interrupted()


def test_ctrl_c_itself_is_the_interruption(watched: None) -> None:
    with pytest.raises(Interrupted, match="kept: all"):
        with interrupt.keeps(lambda: "kept: all"):
            signal.raise_signal(signal.SIGINT)
