"""The page's window.scratchgpt answers its callers at the edges instead of throwing.

Issue 37 item 19: `window.scratchgpt.predict()` without an argument threw, and `excerpt()` on a text
with nothing to score threw instead of returning a promise.
"""

from src.explorer.page import write_explorer
from tests.explorer.browser import chromium, open_page, write_checkpoint

CONFIG = {"kind": "gpt", "context_window": 12, "embedding_dim": 16, "num_heads": 4, "num_layers": 1}


def test_predict_without_a_text_and_the_excerpt_of_an_empty_text(tmp_path):
    checkpoint, text = tmp_path / "gpt.ckpt", tmp_path / "empty.txt"
    write_checkpoint(checkpoint, CONFIG, list("ab \n"), spread=0.3)
    text.write_text("", encoding="utf-8")
    page_file = write_explorer(checkpoint, tmp_path / "page.html", tmp_path, text=str(text))
    with chromium() as browser:
        opened = open_page(browser, page_file)
        assert opened.page.evaluate("window.scratchgpt.predict()")["probs"] is None
        assert opened.page.evaluate("window.scratchgpt.distribution()") is None
        assert opened.page.evaluate("window.scratchgpt.excerpt() instanceof Promise")
        assert opened.page.evaluate("window.scratchgpt.excerpt()") is None  # awaited: nothing to score
        assert opened.errors == []
