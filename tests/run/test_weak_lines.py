"""Issue 37 item 19's weak lines: each says what is true and names the key.

`generate seed=4294967296` drew what seed 0 draws (torch's CPU generator keeps the lower 32 bits;
train refused that seed); `context_window (1) is longer than the validation split (1 characters)`
contradicted itself.
"""

import pytest
import torch

from src.data import corpus
from src.data.corpus import DataError, resolve_corpus
from src.generate import run
from src.rules import ConfigError, window_fits
from src.run.cli import compose


@pytest.mark.parametrize(
    "typed,said",
    [
        (["seed=4294967296"], r"seed must be an integer in \[0, 2\*\*32\), got 4294967296"),
        (["seed=-1"], r"seed must be an integer in \[0, 2\*\*32\)"),
        (["seed=4294967295", "num_samples=2"], r"seed \+ 1 must be below 2\*\*32"),
    ],
)
def test_a_seed_torch_would_alias_is_refused_before_anything_loads(typed, said):
    assert torch.equal(  # why: 2**32 is 0 to the generator
        torch.rand(3, generator=torch.Generator().manual_seed(2**32)),
        torch.rand(3, generator=torch.Generator().manual_seed(0)),
    )
    with pytest.raises(ConfigError, match=said):
        run(compose("generate", [*typed, "ckpt_path=/nonexistent"]))


def test_a_window_that_does_not_fit_says_why_without_contradicting_itself():
    with pytest.raises(ConfigError) as refused:
        window_fits("validation", 1, 1)
    assert str(refused.value).startswith(
        "context_window (1) needs windows of 2 characters (its inputs and the character after them), more than "
        "the validation split's 1: lower model.context_window"
    )


@pytest.mark.parametrize(
    "key,said",
    [
        ("data.path", r"data\.path=.*gone\.txt does not exist or is not a file: point data\.path at"),
        ("data_path", r"the checkpoint's text .*gone\.txt does not exist or is not a file: pass data_path=<a UTF-8"),
        ("text", r"the checkpoint's text .*gone\.txt does not exist or is not a file: pass text=<a UTF-8"),
    ],
)
def test_a_gone_text_is_named_by_the_commands_own_key(tmp_path, key, said):
    """evaluate and explore on a run whose text was deleted named data.path (their keys: data_path, text=)."""
    with pytest.raises(DataError, match=said):
        resolve_corpus(tmp_path / "gone.txt", tmp_path, key=key)


def test_an_unreadable_text_names_the_key(tmp_path, monkeypatch):
    """An unreadable text was a raw `[Errno 13] Permission denied` naming no key."""
    text = tmp_path / "text.txt"
    text.write_text("abc\n")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(corpus, "open", denied, raising=False)
    with pytest.raises(
        DataError, match=r"cannot read .*text\.txt \(Permission denied\): check its permissions, or set"
    ):
        resolve_corpus(text, tmp_path, key="data_path")


@pytest.mark.slow
@pytest.mark.parametrize("limit", [60_000, 300_000])  # TensorBoard's events first; then the checkpoint
def test_a_file_size_limit_is_named_as_such_not_as_a_full_disk(limit, tmp_path):
    """Issue 48: past `ulimit -f` a run ended in a raw `[Errno 27] File too large`, or in a full disk's
    advice to free space, which does not lift the limit."""
    import resource
    import subprocess
    import sys

    from tests.helpers import ROOT, tiny_training

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    command = [sys.executable, "-m", "src.train", *tiny_training(tmp_path, f"hydra.run.dir={tmp_path / 'run'}")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=limited)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert last.startswith("error: ") and "Errno" not in last and "room" not in last, last
    assert f"file-size limit ({limit / 1e6:,.1f} MB, ulimit -f)" in last and "ulimit -f unlimited" in last, last
