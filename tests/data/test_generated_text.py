"""Texts made with a fixed seed (src/data/corpus.py): the same every time, written once, found by Hydra."""

import re

from omegaconf import OmegaConf

from src.data.corpus import generated_text, repeated_strings
from src.run.cli import compose


def test_repeated_strings_are_strings_written_twice_and_fixed_by_the_seed():
    text = repeated_strings(length=5000)
    assert len(text) == 5000 and set(text) == set("abcdefghijklmnopqrstuvwxyz")
    assert text == repeated_strings(length=5000) and text != repeated_strings(seed=1, length=5000)
    # Walk it: each piece is s s with 8 <= len(s) <= 16 (the last may be cut).
    position, lengths = 0, []
    while position < 4900:
        fits = [n for n in range(8, 17) if text[position : position + n] == text[position + n : position + 2 * n]]
        assert fits, text[position : position + 40]
        lengths.append(fits[0])
        position += 2 * fits[0]
    assert len(lengths) > 150 and set(lengths) == set(range(8, 17))


def test_the_resolver_writes_the_text_once_and_a_config_reads_its_path(tmp_path):
    path = generated_text("repeated_strings", str(tmp_path))
    assert path == str(tmp_path / "generated" / "repeated_strings.txt")
    first = (tmp_path / "generated" / "repeated_strings.txt").stat().st_mtime_ns
    assert generated_text("repeated_strings", str(tmp_path)) == path
    assert (tmp_path / "generated" / "repeated_strings.txt").stat().st_mtime_ns == first  # not written again
    cfg = compose("train", ["experiment=induction_heads", f"paths.data_dir={tmp_path}"])
    assert OmegaConf.select(cfg, "data.path") == path
    assert re.fullmatch(r"[a-z]+", open(path).read(200))
