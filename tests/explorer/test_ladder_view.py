"""The page's n-gram ladder (issue 46): the run's result.json "ngram" drawn with the model's loss on it."""

import json

from src.explorer.page import write_explorer
from tests.explorer.browser import chromium, open_page, write_checkpoint

VOCAB = sorted(set("First Citizen:\nBefore we proceed any further, hear me speak.\n"))
GPT = {"kind": "gpt", "context_window": 16, "embedding_dim": 16, "num_heads": 4, "num_layers": 2}
LADDER = {
    "train": [3.309, 2.452, 1.903, 1.491, 1.216, 0.983, 0.761, 0.557, 0.383],
    "val": [3.347, 2.487, 2.06, 1.798, 1.709, 1.75, 1.823, 1.892, 1.946],
    "placed": "val loss 1.765: between the 4-gram (1.798) and the 5-gram (1.709) models of this text; ...",
}


def test_the_ladder_shows_each_order_and_the_model_s_loss_only_when_the_run_has_one(tmp_path):
    pages = []
    for name, result in (("with", {"ngram": LADDER}), ("without", {"ngram": None})):
        checkpoint = tmp_path / name / "checkpoints" / "best.ckpt"
        checkpoint.parent.mkdir(parents=True)
        write_checkpoint(checkpoint, GPT, VOCAB, spread=0.3)
        (tmp_path / name / "result.json").write_text(json.dumps(result))
        text = tmp_path / "text.txt"
        text.write_text("".join(VOCAB) * 3, encoding="utf-8")
        pages.append(write_explorer(checkpoint, tmp_path / f"{name}.html", tmp_path, text=str(text)))
    with chromium() as browser:
        opened = open_page(browser, pages[0])
        page = opened.page
        assert page.locator("#ladder-section").is_visible()
        assert page.locator("#ladder svg rect").count() == 9
        assert page.locator("#ladder svg circle").count() == 9
        assert page.inner_text("#ladder p") == LADDER["placed"]
        assert opened.errors == [] and opened.requests == []
        opened = open_page(browser, pages[1])
        assert not opened.page.locator("#ladder-section").is_visible() and opened.errors == []
