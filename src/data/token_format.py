"""A token cache on disk, for its reader (token_cache.py) and its writer (token_encode.py):
`<cache_dir>/tokens/<name>-<hash of the file's path, size and mtime>/` holds

    tokens.bin   every character's id in text order: uint8, uint16 or uint32, as the vocabulary needs
    meta.json    vocabulary, dtype, number of tokens, tokens.bin's CRC-32, and the source's path, size,
                 mtime, sha256 and CRC-32
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

FORMAT = 2  # bump when the layout of a cache changes; older caches are then rebuilt


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise AssertionError("unreachable: there are fewer code points than 2**32")


def crc32_of(path: Path, chunk_bytes: int = 16 * 2**20) -> int:
    """CRC-32 of a file's bytes, read in chunks (~1.5 GB/s: a few ms for a text of a few MB)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            crc = zlib.crc32(chunk, crc)
    return crc
