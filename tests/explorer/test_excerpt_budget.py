"""`explore excerpt_chars` stays within the page's budget, and text= is read only as far as the excerpt.

Issue 37 item 14: `excerpt_chars=1000000000000 text=<a 212 MB file>` wrote a 220 MB page (the budget
is 8 MB) whose "Where it fails" threw `RangeError: Invalid array length`.
"""

import pytest
from omegaconf import OmegaConf

from src.explore import run
from src.explorer.payload import EXCERPT_MAX_CHARS, file_text
from src.rules import ConfigError


@pytest.mark.parametrize("chars", [10**12, EXCERPT_MAX_CHARS + 1, 1, "many"])
def test_an_excerpt_beyond_the_budget_is_refused_naming_the_key(chars):
    cfg = OmegaConf.create({"excerpt_chars": chars, "weights": "auto"})
    with pytest.raises(ConfigError, match=rf"excerpt_chars must be an integer from 2 to {EXCERPT_MAX_CHARS:,}"):
        run(cfg)


def test_the_excerpt_reads_only_the_opening_of_a_big_text(tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes("日本語 text\n".encode() * 1000 + b"\xff" * 5_000_000)  # not UTF-8 after its opening
    text, source = file_text(big, 2000)
    assert text == ("日本語 text\n" * 1000)[:2000] and source.startswith("the first 2,000 characters of")
