"""Memory-map a text's token cache on every run; encode it (token_encode.py) only when there is none or it
is damaged. The splits are views of tokens.bin, so one cache serves every data.val_fraction."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from src.data.corpus import FORMAT, DataError, crc32_of, token_dtype


@dataclass
class EncodedCorpus:
    """A memory-mapped encoded text: tokens[i] is the index of character i in vocab."""

    directory: Path
    vocab: list[str]
    tokens: np.ndarray  # np.memmap (n_tokens,), read-only
    sha256: str  # of the source text: a resumed run compares it with its checkpoint's
    source: Path | None = None  # the text file, as the run named it (set by open_corpus)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


def cache_key(source: Path, vocab: str | None = None) -> str:
    """`<name>-<hash of path, size, mtime[, a fixed vocabulary]>`: a changed file gets a new key."""
    stat = source.stat()
    identity = f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{FORMAT}|{vocab if vocab is not None else ''}"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", source.stem)[:40] or "text"
    return f"{name}-{hashlib.blake2b(identity.encode(), digest_size=6).hexdigest()}"


def damage(meta: dict[str, Any], tokens: np.ndarray, source: Path | None, vocab: list[str] | None) -> str | None:
    """What is wrong with a complete cache, or None, checked on every run at less than one encode's cost:
    the vocabulary, the token width, the source, every id inside the vocabulary, and the CRC-32s of
    tokens.bin and of the text (a zero-filled tokens.bin after a crash, a text edited in place)."""
    cached = list(meta["vocab"])
    if vocab is not None and cached != list(vocab):
        return "its vocabulary is not the checkpoint's"
    if vocab is None and any(a >= b for a, b in zip(cached, cached[1:], strict=False)):
        return "its vocabulary is not sorted and distinct"
    if not cached or tokens.dtype != token_dtype(len(cached)):
        return f"{tokens.dtype} ids for {len(cached)} characters"
    if source is not None:
        stat, was = source.stat(), meta["source"]
        if (was["path"], was["size"], was["mtime_ns"]) != (str(source.resolve()), stat.st_size, stat.st_mtime_ns):
            return f"it records another source than {source}"
    if len(tokens) and int(tokens.max()) >= len(cached):
        return f"id {int(tokens.max())} is outside its vocabulary of {len(cached)} characters"
    if zlib.crc32(tokens) != meta["tokens_crc32"]:
        return "tokens.bin is not what was written: its checksum differs (zeroed or overwritten)"
    if source is not None and crc32_of(source) != meta["source"]["crc32"]:
        return f"{source.name} changed since it was encoded, though its size and modification time did not"
    return None


def load(directory: Path, source: Path | None = None, vocab: list[str] | None = None) -> EncodedCorpus | None:
    """The cache in `directory` memory-mapped, or None if it is missing, incomplete or damaged (said on stderr)."""
    try:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        dtype = np.dtype(meta["dtype"])
        complete = (directory / "tokens.bin").stat().st_size == meta["num_tokens"] * dtype.itemsize
        if meta.get("format") != FORMAT or not complete:
            return None
        tokens = np.memmap(directory / "tokens.bin", dtype=dtype, mode="r", shape=(meta["num_tokens"],))
        wrong = damage(meta, tokens, source, vocab)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if wrong is not None:
        print(f"warning: the token cache {directory} is damaged ({wrong}): encoding the text again", file=sys.stderr)
        return None
    return EncodedCorpus(directory, list(meta["vocab"]), tokens, meta["source"]["sha256"])


def open_corpus(source: Path, cache_dir: str | Path, vocab: list[str] | None = None) -> EncodedCorpus:
    """The encoded, memory-mapped `source`: from its cache, or encoded now (once) into it. vocab: a
    checkpoint's (resume, evaluate): the text's own cache if it has that vocabulary, else one keyed by it."""
    root = Path(cache_dir).expanduser() / "tokens"
    directory = root / cache_key(source)
    corpus = load(directory, source)
    if vocab is not None and (corpus is None or corpus.vocab != list(vocab)):
        directory = root / cache_key(source, "".join(vocab))
        corpus = load(directory, source, list(vocab))
    if corpus is None:
        from src.data.token_encode import encode, remove_outdated  # a cache miss: the text's first run

        shutil.rmtree(directory, ignore_errors=True)  # incomplete or of an older format
        try:
            encode(source, directory, vocab)
        except OSError as err:
            raise DataError(
                f"cannot write the token cache of {source.name} to {root} ({err.strerror or err}): "
                f"free some disk space or set data.cache_dir to a writable folder"
            ) from None
        remove_outdated(root, source)
        corpus = load(directory, source, list(vocab) if vocab is not None else None)
        if corpus is None:
            raise DataError(f"the token cache {directory} could not be read back: check the disk and data.cache_dir")
    corpus.source = source
    return corpus
