"""What a token cache is on disk, shared by its reader (token_cache.py) and its writer (token_encode.py).

The cache of a text lives in `<cache_dir>/tokens/<name>-<key>/`, the key a hash of the file's
absolute path, size and modification time, so a changed file gets a new cache (and the old one
is removed). It holds

    tokens.bin   every character's id, in text order: uint8 if the vocabulary has <= 256
                 characters, uint16 up to 65,536, uint32 beyond (CJK, emoji)
    meta.json    vocabulary, dtype, number of tokens, the source's path, size, mtime and sha256
"""

from __future__ import annotations

import numpy as np

FORMAT = 1  # bump when the layout of a cache changes; older caches are then rebuilt


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise AssertionError("unreachable: there are fewer code points than 2**32")
