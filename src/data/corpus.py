"""Getting the training text: a user's file, the cached Tiny Shakespeare, or a first download.

Tiny Shakespeare is downloaded once from its public source, checked against its sha256 and
written atomically (temp file + rename), so an interrupted download never leaves a corrupt
cache behind. Any other UTF-8 text file can be used through `data.path`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


class DataError(ValueError):
    """The training text is missing, unreadable or not what it should be; the message says the fix."""


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
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=destination.parent, prefix=".download-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, destination)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def resolve_corpus(
    path: str | Path | None,
    cache_dir: str | Path,
    url: str = TINY_SHAKESPEARE_URL,
    sha256: str = TINY_SHAKESPEARE_SHA256,
    key: str = "data.path",
) -> Path:
    """The text file to train on: `path` if given, else the verified cache, else a download.

    key: the command's own key for a text (evaluate's data_path, explore's text), named in the fix
    when `path` is a checkpoint's text that is gone or unreadable; data.path when it is the typed one.
    """
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


def first_line(text: str, limit: int = 40) -> str:
    """A text's opening line (at most `limit` characters): the default prompt of samples and pages."""
    line = text.lstrip("\n").split("\n", 1)[0][:limit]
    return line or text[:1]
