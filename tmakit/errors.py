"""The tmakit exception hierarchy.

TmakitError
 +-- CudaDriverError        a driver call returned an error (call, error name, error text)
 +-- TensorMapError         tensor-map parameters broke one or more rules (holds every Violation)
 +-- UnsupportedDeviceError no driver/GPU, or a GPU below the capability a feature needs
 +-- CompileError           NVRTC/ptxas rejected a kernel (log, options, numbered source)
 +-- LaunchError            a kernel launch was refused before reaching the driver
 +-- InvalidArgumentError   a Python-level argument is of the wrong type/value (also a ValueError)
 +-- HangError              a checked launch (``checked=True``) found an mbarrier wait that never completed
"""
from __future__ import annotations

from typing import Any, Sequence


class TmakitError(Exception):
    """Base class of every error tmakit raises on purpose."""


class InvalidArgumentError(TmakitError, ValueError):
    """An argument has the wrong type or value; the message names the parameter and the fix."""

    def __init__(self, parameter: str, value: object, rule: str, fix: str = ""):
        self.parameter, self.value, self.rule, self.fix = parameter, value, rule, fix
        text = f"{parameter}={value!r}: {rule}"
        if fix:
            text += f"; fix: {fix}"
        super().__init__(text)


class CudaDriverError(TmakitError):
    """A CUDA driver call failed. Carries the call's name, the CUresult name and its text."""

    def __init__(self, call: str, code: int, name: str, text: str, hint: str = ""):
        self.call, self.code, self.name, self.text, self.hint = call, code, name, text, hint
        msg = f"{call} failed: {name} ({code}): {text}"
        if hint:
            msg += f"\n  hint: {hint}"
        super().__init__(msg)


class UnsupportedDeviceError(TmakitError):
    """No usable GPU/driver, or the GPU is below the capability the feature needs."""

    def __init__(self, message: str, required: object = None, actual: object = None):
        self.required, self.actual = required, actual
        super().__init__(message)


class TensorMapError(TmakitError, ValueError):
    """Tensor-map parameters violate one or more rules; ``violations`` holds all of them.

    ``suggestion``: the nearest valid request's arguments (a dict to pass back: ``describe_tensor(x,
    **err.suggestion)``), or None when no change of options can make it valid (the tensor itself breaks a rule);
    ``suggestion_line`` shows it as one line ("try: box=(64, 32), swizzle='64B'"); without a suggestion, ``unfixable``
says why (the architecture has no TMA, or the tensor's own parameters break a rule); ``order`` says whether indices
    are in numpy order (outermost first) or driver order (innermost first). tmakit.tensormap.suggest fills them.
    """

    suggestion: "dict | None" = None
    suggestion_line: "str | None" = None
    unfixable: "str | None" = None  # without a suggestion: why (the arch has no TMA, or which tensor parameters)
    order: "str | None" = None

    def __init__(self, violations: Sequence[Any], header: str = "invalid tensor map"):
        self.violations = list(violations)
        lines = [f"{header}: {len(self.violations)} violation(s)"]
        lines += [f"  - {v}" for v in self.violations]
        super().__init__("\n".join(lines))


class CompileError(TmakitError):
    """A kernel failed to compile or assemble. ``dump()`` shows log, options and numbered source.

    Where the log shows the cause is an argument (a target without the instructions the source uses),
    ``parameter``, ``value``, ``rule`` and ``fix`` say so, as an InvalidArgumentError would, on the first line."""

    def __init__(self, name: str, log: str, options: Sequence[str] = (), source: str = "", *,
                 parameter: str | None = None, value: object = None, rule: str = "", fix: str = ""):
        self.name, self.log, self.options, self.source = name, log, list(options), source
        self.parameter, self.value, self.rule, self.fix = parameter, value, rule, fix
        head = f"compiling {name} failed"
        if parameter is not None:
            head += f": {parameter}={value!r}: {rule}; fix: {fix}"
        super().__init__(f"{head}:\n{log.strip()}\n  options: {' '.join(self.options)}")

    def numbered_source(self) -> str:
        return "\n".join(f"{i:5d}  {line}" for i, line in enumerate(self.source.splitlines(), 1))

    def dump(self) -> str:
        return f"{self}\n--- source ---\n{self.numbered_source()}"


class LaunchError(TmakitError):
    """A launch was refused before the driver saw it (argument count/type, shared memory, device)."""


class HangError(TmakitError):
    """A checked launch's bounded wait expired: ``record`` holds what the waiting thread saw (block, thread, the
    barrier's symbol and offset, the parity it waited for, the barrier's state, the last expect_tx posted on it),
    ``findings`` the lint's findings for that barrier. The kernel ran to its end with its waits released, so the
    context is still usable; its outputs are not."""

    def __init__(self, kernel: str, record: Any, findings: Sequence[Any] = ()):
        self.kernel, self.record, self.findings = kernel, record, list(findings)
        lines = [f"kernel {kernel} hung: {record}"]
        if self.findings:
            lines.append("the lint's findings for this barrier:")
            lines += [f"  - {f}" for f in self.findings]
        super().__init__("\n".join(lines))
