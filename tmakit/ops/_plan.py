"""``Plan``: a prepared launch of an op (its decisions, tensor maps and bound launch), run again at will.

Preparing an op call is the slow part: viewing and checking the arrays, choosing the backend, describing
tensor maps, planning tiles, packing the kernel's parameters. A plan does it once (``tmakit.ops.plan_copy``,
``plan_transpose``, ``plan_load_tiles``); then

- ``plan()`` launches again on the same buffers (a bound launch: ``Kernel.bind``), and
- ``plan(*buffers)`` launches on new buffers of the same geometry: every buffer is checked against the one it
  replaces (shape, byte strides, dtype, device; and the address alignment the op's decisions read), its tensor
  maps are re-pointed (``TensorMap.with_address``) and the bound launch's arguments replaced
  (``BoundLaunch.update``). A buffer of another geometry raises ``InvalidArgumentError`` naming it.

A plan keeps the buffers it runs on alive. It holds no global state: two plans never share anything but the
compiled kernel.
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import _driver
from ..arrays import ArrayView
from ..errors import InvalidArgumentError
from . import _checks


def geometry(v: ArrayView) -> tuple:
    """What a buffer must share with the one it replaces."""
    return v.shape, v.strides, v.dtype_name, v.itemsize, v.device


def _describe(v: ArrayView) -> str:
    return f"array of shape {v.shape}, byte strides {v.strides}, {v.dtype_name} on device {v.device}"


def repoint(tensor_map: Any, view: ArrayView) -> Any:
    """``tensor_map`` re-pointed at ``view``'s address (same geometry, checked by the caller)."""
    return tensor_map.with_address(view.ptr)


class Plan:
    """A prepared launch; ``plan()`` runs it again, ``plan(*buffers)`` runs it on new buffers of the same
    geometry. ``result`` describes what runs (the backend, the path, the tiles)."""

    op = "op"  # the op's name, for messages: tmakit.ops.plan_<op>
    names: tuple[str, ...] = ()  # the buffers plan(...) takes, in order

    def __init__(self, result: Any, views: Sequence[ArrayView], kernel: Any = None, args: Sequence[Any] = (),
                 checked: bool | str | None = None, **launch_options: Any) -> None:
        """``checked=True`` binds the hang doctor's twin (``Kernel.bind(..., checked=True)``: bounded mbarrier
        waits, ``HangError``); None follows TMAKIT_CHECK."""
        self.result = result
        self._views = tuple(views)  # the buffers (their owners stay alive with the plan)
        self._args = list(args)
        self._launch = kernel.bind(*args, checked=checked, **launch_options) if kernel is not None else None

    @property
    def backend(self) -> Any:
        return self.result.backend

    def __call__(self, *buffers: Any) -> Any:
        if buffers:
            self._repoint(buffers)
        if self._launch is not None:
            self._launch()
        return self.result

    def _repoint(self, buffers: Sequence[Any]) -> None:
        if len(buffers) != len(self.names):
            raise InvalidArgumentError("buffers", f"{len(buffers)} arrays", f"must be {len(self.names)}: "
                                       f"({', '.join(self.names)})", f"call plan() or plan({', '.join(self.names)})")
        views = self._adopt(tuple(_checks.view(b, name) for b, name in zip(buffers, self.names)))
        for name, new, old in zip(self.names, views, self._views):
            if geometry(new) != geometry(old):
                raise InvalidArgumentError(name, _describe(new), f"must have the plan's geometry ({_describe(old)})",
                                           f"make a new plan: tmakit.ops.plan_{self.op}(...)")
        self._retarget(views)
        self._views = views

    def _adopt(self, views: tuple[ArrayView, ...]) -> tuple[ArrayView, ...]:
        """The views as the plan's kernel sees them (an op that reads a peer GPU's array re-homes its view)."""
        return views

    def _retarget(self, views: tuple[ArrayView, ...]) -> None:
        """Check the op's address-dependent decisions against ``views`` and replace the launch's arguments."""
        raise NotImplementedError

    def _refuse(self, name: str, value: Any, rule: str) -> None:
        raise InvalidArgumentError(name, value, rule, f"make a new plan for it: tmakit.ops.plan_{self.op}(...)")

    def _update(self, index: int, value: Any) -> None:
        """Replace positional argument ``index`` of the bound launch."""
        self._args[index] = value
        if self._launch is not None:
            self._launch.update(index, value)

    def __repr__(self) -> str:
        return f"<tmakit.ops plan_{self.op} {self.result}>"


def wait_for_stream(stream: Any) -> None:
    """Wait for the work a plan queued on ``stream`` (None: the whole context), e.g. before freeing its workspace."""
    from ..streams import stream_handle

    if stream is None:
        _driver.call("cuCtxSynchronize")
    else:
        _driver.call("cuStreamSynchronize", stream_handle(stream))
