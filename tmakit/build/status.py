"""A status line for compiles that take a while: nobody should wait 15 s in silence.

A compile still running after ``DELAY_S`` (2 s) shows, on stderr, which file it compiles, for which
architecture, and that the result is cached afterwards (a rich spinner on a terminal, one plain line
otherwise); when it ends, one line says how long it took. Shown only when stderr is a terminal, or when
``TMAKIT_COMPILE_STATUS=1`` asks for it; ``TMAKIT_COMPILE_STATUS=0`` turns it off. Nothing is ever written to
stdout, so piped and ``--json`` output stay clean.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Iterator

from ..errors import InvalidArgumentError

ENV_VAR = "TMAKIT_COMPILE_STATUS"
DELAY_S = 2.0  # compiles shorter than this say nothing
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def wanted() -> bool:
    """Whether a long compile shows its status: TMAKIT_COMPILE_STATUS, else whether stderr is a terminal."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    if value:
        raise InvalidArgumentError(ENV_VAR, os.environ[ENV_VAR], "must be 1 (show the status of long compiles on "
                                   "stderr) or 0 (never)", f"unset {ENV_VAR}, or set it to 1 or 0")
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stderr: no terminal to show it on
        return False


@contextlib.contextmanager
def compile_status(name: str, arch: str, cached_in: str | None) -> Iterator[None]:
    """Around one compile: after DELAY_S a status naming ``name``, ``arch`` and where the result is cached
    (``cached_in``; None: the cache is off), and a closing line with the time it took."""
    if not wanted():
        yield
        return
    from rich.console import Console

    console = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    after = f"cached in {cached_in} afterwards" if cached_in else "not cached: TMAKIT_CACHE=0"
    lock, state = threading.Lock(), {"done": False, "status": None, "shown": False}
    start = time.perf_counter()

    def show() -> None:
        with lock:
            if state["done"]:
                return
            state["shown"] = True
            text = f"tmakit: compiling {name} for {arch} with NVRTC ({after})"
            if console.is_terminal:
                state["status"] = console.status(text)
                state["status"].start()
            else:
                console.print(f"{text} ...")

    timer = threading.Timer(DELAY_S, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["status"] is not None:
                state["status"].stop()
            if state["shown"]:
                console.print(f"tmakit: compiled {name} for {arch} in {time.perf_counter() - start:.1f} s "
                              f"({'the next use loads it from the cache' if cached_in else 'not cached'})")
