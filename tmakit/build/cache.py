"""The on-disk cache of compiled kernels (CuPy's ``_compiler_cache`` and Triton's FileCacheManager idea).

One file per key: an 8-byte header length, a JSON header (kind, arch, options, log, PTX, ...) and the code.
Writes go to a temporary file in the same folder and are renamed over the target (``os.replace``), so a
reader sees a whole entry or none, even with several processes compiling the same kernel.
``TMAKIT_CACHE_DIR`` moves the cache (default ``~/.cache/tmakit``); ``TMAKIT_CACHE=0`` disables it.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1  # bump when the entry format or what the key covers changes


def cache_enabled() -> bool:
    return os.environ.get("TMAKIT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    return Path(os.environ.get("TMAKIT_CACHE_DIR") or Path.home() / ".cache" / "tmakit").expanduser()


def cache_key(parts: dict[str, Any]) -> str:
    """SHA-256 of the schema version and every input that changes the output (canonical JSON)."""
    blob = json.dumps({"schema": SCHEMA_VERSION, **parts}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / key[:2] / f"{key}.bin"


def load(key: str) -> tuple[dict[str, Any], bytes] | None:
    """The cached ``(header, code)`` or None. A truncated or unreadable entry counts as a miss and is rebuilt."""
    if not cache_enabled():
        return None
    try:
        data = _path(key).read_bytes()
        (n,) = struct.unpack_from("<Q", data)
        header = json.loads(data[8:8 + n])
        code = data[8 + n:]
        if header.get("key") != key or len(code) != header.get("code_size"):
            return None
        return header, code
    except (OSError, ValueError, struct.error):
        return None


def store(key: str, header: dict[str, Any], code: bytes) -> None:
    """Write an entry atomically. A read-only or full disk only costs the cache, never the compile."""
    if not cache_enabled():
        return
    path = _path(key)
    head = json.dumps({**header, "key": key, "code_size": len(code)}).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:8]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(struct.pack("<Q", len(head)) + head + code)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        import warnings

        warnings.warn(f"tmakit: could not write the kernel cache at {path} ({exc}); "
                      "set TMAKIT_CACHE_DIR to a writable folder or TMAKIT_CACHE=0", RuntimeWarning, stacklevel=3)
