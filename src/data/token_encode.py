"""Encode a text file into its token cache, on a cache miss only (a text's first run, or a changed text).

The text streams in chunks through an incremental UTF-8 decoder: nothing of the corpus' size is held as a
Python string. Pass 1 collects the characters (the vocabulary is their sorted list, as
CharTokenizer.from_text builds it); pass 2 maps them to ids with a numpy lookup table. Everything goes
into a temporary directory renamed into place when complete: an interrupted encode leaves nothing a run reads.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import shutil
import socket
import sys
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from src.data.corpus import FORMAT, DataError, crc32_of, fsync, token_dtype
from src.data.tokenizer import show_characters

CHUNK_BYTES = 16 * 2**20  # 16 MiB of text at a time: ~200 MB of working memory at most
PROGRESS_BYTES = 32 * 2**20  # texts at least this big show a progress bar while they encode
UNICODE_SIZE = 0x110000  # number of code points


def _chunks(source: Path, chunk_bytes: int, progress: Any) -> Iterator[tuple[bytes, bytes | np.ndarray]]:
    """(raw bytes, characters) for each chunk: the bytes themselves if all ASCII (no decoding), else the
    code points as uint32. A leading byte-order mark is skipped; non-UTF-8 bytes raise DataError."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    try:
        with open(source, "rb") as f:
            offset = len(codecs.BOM_UTF8) if f.read(len(codecs.BOM_UTF8)) == codecs.BOM_UTF8 else 0
            f.seek(offset)
            progress.update(offset)
            while True:
                raw = f.read(chunk_bytes)
                pending = len(decoder.getstate()[0])
                if not pending and raw.isascii():
                    if raw:
                        yield raw, raw
                else:
                    try:
                        text = decoder.decode(raw, final=not raw)
                    except UnicodeDecodeError as err:
                        at = offset - pending + err.start
                        raise DataError(
                            f"{source} is not UTF-8 text (byte {at} is invalid): "
                            f"convert it to UTF-8 or choose another data.path"
                        ) from None
                    yield raw, np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
                offset += len(raw)
                progress.update(len(raw))
                if not raw:
                    return
    except OSError as err:
        raise DataError(f"cannot read {source} ({err.strerror}): check the path and its permissions") from None


def _distinct_bytes(data: bytes) -> bytes:
    """The set of byte values in `data`, in a few C-speed passes: each deletes the values found so far."""
    found = b""
    rest = data
    while rest:
        found += bytes(set(rest[:65_536]))
        rest = rest.translate(None, found)
    return found


def _remove_stale_temporaries(root: Path) -> None:
    """Temporary directories of encodes on this host whose process is gone (killed mid-encode)."""
    host = socket.gethostname()
    for tmp in root.glob(".tmp-*"):
        parts = tmp.name.split("~")
        if len(parts) != 4 or parts[1] != host:
            continue
        try:
            os.kill(int(parts[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (PermissionError, ValueError):
            pass


def encode(
    source: Path,
    directory: Path,
    vocab: list[str] | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> None:
    """Encode `source` into `directory` (which must not exist yet), atomically. vocab: None builds it from
    the text; a checkpoint's is used as is, refusing characters outside it."""
    root = directory.parent
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(root)
    before = source.stat()
    tmp = root / f".tmp-{directory.name}~{socket.gethostname()}~{os.getpid()}~{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        progress = tqdm(
            total=2 * before.st_size,
            desc=f"encoding {source.name}",
            unit="B",
            unit_scale=True,
            mininterval=1.0,
            file=sys.stderr,
            disable=before.st_size < PROGRESS_BYTES,
        )
        with progress:
            seen = np.zeros(UNICODE_SIZE, dtype=bool)  # pass 1: which characters occur
            digest = hashlib.sha256()
            tokens_crc = n_tokens = 0
            for raw, chars in _chunks(source, chunk_bytes, progress):
                digest.update(raw)
                seen[np.frombuffer(_distinct_bytes(chars), np.uint8) if isinstance(chars, bytes) else chars] = True
                n_tokens += len(chars)
            if n_tokens == 0:
                raise DataError(f"{source} is empty: choose a text file with content for data.path")
            codepoints = np.flatnonzero(seen)
            if vocab is None:
                vocab = [chr(c) for c in codepoints]
            else:
                unknown = sorted(set(map(chr, codepoints)) - set(vocab))
                if unknown:
                    raise DataError(
                        f"{source} has {len(unknown)} character(s) not in the checkpoint's vocabulary: "
                        f"{show_characters(unknown)}; use a text made of the characters the model was trained on"
                    )
            dtype = token_dtype(len(vocab))
            lookup = np.zeros(UNICODE_SIZE, dtype=dtype)  # code point -> id
            lookup[[ord(ch) for ch in vocab]] = np.arange(len(vocab), dtype=dtype)
            ascii_table = lookup[:128].tobytes() + bytes(128) if dtype == np.uint8 else None
            with open(tmp / "tokens.bin", "wb") as out:  # pass 2: ids, chunk by chunk
                for _, chars in _chunks(source, chunk_bytes, progress):
                    if isinstance(chars, bytes) and ascii_table is not None:
                        ids = chars.translate(ascii_table)  # one byte in, one id out, in C
                    else:
                        cps = np.frombuffer(chars, np.uint8) if isinstance(chars, bytes) else chars
                        ids = lookup[cps].tobytes()
                    out.write(ids)
                    tokens_crc = zlib.crc32(ids, tokens_crc)
                out.flush()
                os.fsync(out.fileno())
        after = source.stat()
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise DataError(f"{source} changed while it was being encoded: run again once it is written")
        meta = {
            "format": FORMAT,
            "vocab": "".join(vocab),
            "dtype": dtype.name,
            "num_tokens": n_tokens,
            "tokens_crc32": tokens_crc,
            "source": {
                "path": str(source.resolve()),
                "size": before.st_size,
                "mtime_ns": before.st_mtime_ns,
                "sha256": digest.hexdigest(),
                "crc32": crc32_of(source),  # the whole file, as each load reads it
            },
        }
        (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
        fsync(tmp / "meta.json")
        try:
            tmp.rename(directory)  # atomic: the cache appears complete or not at all
        except OSError:
            if not (directory / "meta.json").is_file():  # not another process that finished first
                raise
            shutil.rmtree(tmp)
        fsync(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_outdated(root: Path, source: Path) -> None:
    """Caches of an earlier version of the same file (another size or mtime): never used again."""
    stat, path = source.stat(), str(source.resolve())
    for other in root.glob("*/meta.json"):
        try:
            was = json.loads(other.read_text(encoding="utf-8"))["source"]
            if was["path"] == path and (was["size"], was["mtime_ns"]) != (stat.st_size, stat.st_mtime_ns):
                shutil.rmtree(other.parent, ignore_errors=True)
        except (OSError, ValueError, KeyError, TypeError):
            continue
