"""High-level ops on device arrays with an automatic, recorded backend ("tma" on sm_90, else "cp.async").

- ``load_tiles``: real box loads -> shared-memory images (to check against ``tmakit.layout``)
- ``copy``: device-to-device copy through shared memory
- ``transpose``: 2-D transpose for 1/2/4/8-byte elements
"""
from __future__ import annotations

from .copy import CopyResult, copy
from .load_tiles import LoadTilesResult, load_tiles
from .transpose import TransposeResult, transpose

__all__ = ["CopyResult", "LoadTilesResult", "TransposeResult", "copy", "load_tiles", "transpose"]
