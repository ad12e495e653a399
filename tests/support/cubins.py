"""Comparing CUBINs of one source compiled twice.

NVRTC 12.0 names internal-linkage symbols (<nv/target>'s, which the CUDA headers include) after a hash that
changes between compiles a second apart and the compiling process's id, so its CUBINs of one source differ from
compile to compile in those names alone (NVRTC 13.0's do not differ at all)."""
from __future__ import annotations

import re

_INTERNAL_NAME = re.compile(rb"_INTERNAL_[0-9a-f]{8}_\d+_\w+?_[0-9a-f]{8}_\d+")


def same_cubin(a: bytes, b: bytes) -> bool:
    """Whether two CUBINs of one source are the same compile's, the internal symbols' names aside."""
    return a == b or (len(a) == len(b) and _INTERNAL_NAME.sub(b"_", a) == _INTERNAL_NAME.sub(b"_", b))
