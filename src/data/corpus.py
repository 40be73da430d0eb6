"""The training text: a user's file (`data.path`), Tiny Shakespeare (downloaded once, checked against its
sha256), or a text made here with a fixed seed (`data.path=${generated_text:NAME}`); and its token cache's
layout on disk, which token_cache.py reads and token_encode.py writes:

    <cache_dir>/tokens/<name>-<hash of the file's path, size and mtime>/
      tokens.bin   every character's id in text order: uint8, uint16 or uint32, as the vocabulary needs
      meta.json    vocabulary, dtype, number of tokens, tokens.bin's CRC-32, and the source's path, size,
                   mtime, sha256 and CRC-32
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
FORMAT = 2  # the token cache's layout: bump it when that changes, and older caches are rebuilt


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


def fsync(path: Path) -> None:
    """Make a file, or a folder's renames, durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DataError(ValueError):
    """The training text is missing, unreadable or not what it should be; the message says the fix."""


def write_atomically(path: Path, content: str | bytes) -> None:
    """Whole or not at all (temp file + rename): a reader or a killed writer never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode() if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_of(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        raise DataError(
            f"cannot read {path} ({err.strerror or err}): check its permissions, or set data.path=/path/to/your.txt"
        ) from None


def cached_corpus_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / "tinyshakespeare" / "input.txt"


def download(url: str, destination: Path, sha256: str, timeout: float = 30.0) -> None:
    """Fetch url into destination atomically, refusing content whose checksum differs."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            payload = response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise DataError(
            f"could not download Tiny Shakespeare from {url} ({reason}); "
            f"put the file at {destination} or set data.path=/path/to/your.txt"
        ) from None
    digest = hashlib.sha256(payload).hexdigest()
    if digest != sha256:
        raise DataError(
            f"the download from {url} has sha256 {digest[:12]}..., expected {sha256[:12]}...; "
            f"put the right file at {destination} or set data.path=/path/to/your.txt"
        )
    write_atomically(destination, payload)


def resolve_corpus(
    path: str | Path | None,
    cache_dir: str | Path,
    url: str = TINY_SHAKESPEARE_URL,
    sha256: str = TINY_SHAKESPEARE_SHA256,
    key: str = "data.path",
) -> Path:
    """The text file to train on: `path` if given, else the verified cache, else a download. key: the
    command's own key for a text (evaluate's data_path), named when a checkpoint's text is gone."""
    if path is not None:
        user_file = Path(path).expanduser()
        if not user_file.is_file():
            if key != "data.path":
                raise DataError(
                    f"the checkpoint's text {path} does not exist or is not a file: pass {key}=<a UTF-8 text file> "
                    f"to use another"
                )
            raise DataError(f"data.path={path} does not exist or is not a file: point data.path at a UTF-8 text file")
        try:
            with open(user_file, "rb"):
                pass
        except OSError as err:
            raise DataError(
                f"cannot read {path} ({err.strerror or err}): check its permissions, "
                f"or set {key}=<another UTF-8 text file>"
            ) from None
        return user_file
    cached = cached_corpus_path(cache_dir)
    if cached.is_file():
        digest = sha256_of(cached)
        if digest != sha256:
            raise DataError(
                f"{cached} has sha256 {digest[:12]}..., not Tiny Shakespeare's {sha256[:12]}...; "
                f"delete it to download it again, or set data.path=/path/to/your.txt"
            )
        return cached
    download(url, cached, sha256)
    return cached


def recorded_text(data: dict[str, Any], cache_dir: str | Path, key: str) -> Path:
    """The text a checkpoint was trained on, as its record (`hyper_parameters.data`) names it, read only if it
    is that text: a shared checkpoint's path may name any local file (a private one), so the file must have
    the sha256 the checkpoint records. No path: Tiny Shakespeare, checked against its own sha256. key: the
    command's key for a text the user names instead."""
    path = resolve_corpus(data.get("path"), cache_dir, key=key)
    if data.get("path") is None:
        return path
    recorded = data.get("sha256")
    if recorded is None:
        raise DataError(
            f"the checkpoint names its text {data['path']} but records no sha256 of it, so that file may not be "
            f"the text it was trained on: name the text to use with {key}=<file>"
        )
    digest = sha256_of(path)
    if digest != recorded:
        raise DataError(
            f"{path} is not the text the checkpoint was trained on (sha256 {digest[:12]}..., the checkpoint "
            f"records {str(recorded)[:12]}...): name the text to use with {key}=<file>"
        )
    return path


def first_line(text: str, limit: int = 40) -> str:
    """A text's opening line (at most `limit` characters): the default prompt of samples and pages."""
    line = text.lstrip("\n").split("\n", 1)[0][:limit]
    return line or text[:1]


def repeated_strings(seed: int = 0, length: int = 500_000, shortest: int = 8, longest: int = 16) -> str:
    """Random strings s of shortest..longest letters, each written twice (s s), until `length` characters:
    only copying, as an induction head does, predicts a second copy (docs/heads.md). random.Random(seed)
    is stable across Python versions for these calls: the text is the same on every machine."""
    rng = random.Random(seed)
    pieces, total = [], 0
    while total < length:
        s = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(shortest, longest)))
        pieces.append(s + s)
        total += 2 * len(s)
    return "".join(pieces)[:length]


GENERATED_TEXTS = {"repeated_strings": repeated_strings}


def generated_text(name: str, data_dir: str) -> str:
    """The resolver ${generated_text:NAME}: the path of text `name` under data_dir/generated/, written
    there first if it is not yet."""
    if name not in GENERATED_TEXTS:
        raise ValueError(f"generated_text: no text named {name!r}; the texts are {', '.join(GENERATED_TEXTS)}")
    path = Path(data_dir) / "generated" / f"{name}.txt"
    if not path.is_file():
        write_atomically(path, GENERATED_TEXTS[name]())
    return str(path)


OmegaConf.register_new_resolver("generated_text", generated_text, replace=True)
