"""Texts made here, with a fixed seed, instead of downloaded: `data.path=${generated_text:NAME}`.

repeated_strings: random strings of 8-16 lowercase letters, each written twice, back to back
("qhxkwbzaqhxkwbza" ...). The first copy of a string cannot be predicted; the second can, by
copying: find the earlier occurrence of the current letter and predict the letter that followed
it, which is what an induction head does, or attend a fixed distance back, which pays for the
strings of that one length (`experiment=induction_heads` learns the first: docs/heads.md).

The text is written once into `<data dir>/generated/` (atomically) and is the same on every
machine: Python's `random.Random(seed)` is stable across versions for these calls.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def repeated_strings(seed: int = 0, length: int = 500_000, shortest: int = 8, longest: int = 16) -> str:
    """Random strings s of shortest..longest letters, each written twice (s s), until `length` characters."""
    rng = random.Random(seed)
    pieces, total = [], 0
    while total < length:
        s = "".join(rng.choice(LETTERS) for _ in range(rng.randint(shortest, longest)))
        pieces.append(s + s)
        total += 2 * len(s)
    return "".join(pieces)[:length]


TEXTS = {"repeated_strings": repeated_strings}


def generated_text(name: str, data_dir: str) -> str:
    """The path of text `name` under data_dir/generated/, written there first if it is not yet."""
    if name not in TEXTS:
        raise ValueError(f"generated_text: no text named {name!r}; the texts are {', '.join(TEXTS)}")
    path = Path(data_dir) / "generated" / f"{name}.txt"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{name}-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(TEXTS[name]())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return str(path)


OmegaConf.register_new_resolver("generated_text", generated_text, replace=True)
