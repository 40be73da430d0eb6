"""What a text holds reaches the terminal and TensorBoard as text: its control characters escaped.

Issue 37 item 18: a text's ESC sequences were written raw to the terminal by the closing sample
and by generate (the terminal's title and colours changed), and a lone \\r in a TensorBoard sample
ended its Markdown code block, so the rest rendered as Markdown (a remote <img> included).
"""

import io
import logging
import os
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from src.data.tokenizer import PrintableStream, printable
from tests.helpers import ROOT, train_in_process

# A text whose lines set the terminal's title, ring its bell, and hide a Markdown image after a lone \r.
HOSTILE = "日本 ok \x1b]0;pwned\x07 fine\r![x](http://example.com/x.png) \x1b[31mred\x1b[0m\r\nnext line\n" * 80


def shown_safely(text: str) -> bool:
    """No control character but a new line, a tab and the \\r of a \\r\\n."""
    return all(
        unicodedata.category(ch) != "Cc" or ch in "\n\t" or (ch == "\r" and text[i + 1 : i + 2] == "\n")
        for i, ch in enumerate(text)
    )


@given(st.lists(st.text(), max_size=8))
def test_printable_text_keeps_every_visible_character_and_escapes_the_controls(pieces):
    text = "".join(pieces)
    assert shown_safely(printable(text))
    if shown_safely(text):
        assert printable(text) == text
    out = io.StringIO()
    stream = PrintableStream(out)  # as generate writes: a piece at a time
    for piece in pieces:
        stream.write(piece)
    stream.close()
    assert out.getvalue() == printable(text)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """A tiny model trained on HOSTILE, and what its run logged."""
    tmp_path = tmp_path_factory.mktemp("hostile")
    source = tmp_path / "hostile.txt"
    source.write_text(HOSTILE, encoding="utf-8", newline="")
    run = tmp_path / "run"
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("src").addHandler(handler)
    logging.getLogger("src").setLevel(logging.INFO)
    try:
        train_in_process(
            run,
            f"data.path={source}",
            "trainer.max_steps=30",
            "trainer.val_check_interval=30",
            "optimizer.lr=3e-2",
            "sample.max_new_tokens=200",
            "sample.temperature=0",
            "callbacks.attention_maps=null",
            "callbacks.sample_text.max_new_tokens=200",
            "explorer=false",
        )
    finally:
        logging.getLogger("src").removeHandler(handler)
    return run, [r.getMessage() for r in records]


@pytest.mark.slow
def test_the_closing_sample_and_tensorboards_samples_escape_a_texts_control_characters(hostile_run):
    run, said = hostile_run
    sample = next(m for m in said if m.startswith("sample:"))
    assert "\x1b" not in sample and "\\x1b" in sample and shown_safely(sample)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    for event in events.Tensors("samples/text_summary"):
        text = tensor_util.make_ndarray(event.tensor_proto).item().decode()
        assert shown_safely(text) and all(line.startswith("    ") for line in text.replace("\r\n", "\n").split("\n"))


@pytest.mark.slow
def test_generate_escapes_what_the_terminal_cannot_show_and_a_closed_pipe_is_not_an_error(hostile_run):
    """Issue 37 items 15 and 19: under LC_ALL=C PYTHONIOENCODING=ascii generate said `'ascii' codec can't
    encode` (no key, no fix); `generate ... | head -n 1` exited 2 with `error: [Errno 32] Broken pipe`."""
    run, _ = hostile_run
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "src.generate",
            f"ckpt_path={run}",
            "prompt='日本'",
            "max_new_tokens=20000",
            "temperature=0",
            "device=cpu",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "LC_ALL": "C", "PYTHONIOENCODING": "ascii", "PYTHONUNBUFFERED": "1"},
    )
    # The first 300 bytes, then the pipe closed, as `head -c 300` does (not `head -n 1`: a greedy sample
    # may hold no line break, and the reader would wait for all 20,000 characters to be drawn)
    first = proc.stdout.read(300).decode("ascii")  # ascii: nothing but ASCII came through
    proc.stdout.close()
    stderr = proc.stderr.read().decode("ascii")
    assert proc.wait(timeout=120) == 0, stderr
    assert first.startswith("\\u65e5\\u672c") and "\x1b" not in first and shown_safely(first)
    assert "error" not in stderr and "Traceback" not in stderr, stderr
