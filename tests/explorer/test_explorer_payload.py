"""What the page carries of a run: every step's head scores, maps within a budget, its loss curves."""

from __future__ import annotations

import json
from pathlib import Path

from src.explorer.payload import run_history, run_title, thin_maps


def snapshots(count: int, map_bytes: int) -> list[dict]:
    return [{"step": 10 * k, "scores": {"induction": [[k]]}, "maps": {"probe": "x" * map_bytes}} for k in range(count)]


def test_maps_are_thinned_to_the_budget_and_every_score_kept():
    cases = [(5, 10_000, [0, 1, 2, 3, 4]), (21, 5 * 120, [0, 5, 10, 15, 20]), (9, 130, [8]), (9, 50, [])]
    for count, budget, kept in cases:
        thinned = thin_maps(snapshots(count, 100), budget)
        assert [s["scores"]["induction"][0][0] for s in thinned] == list(range(count))  # every step's scores
        assert [k for k, s in enumerate(thinned) if s["maps"] is not None] == kept
        assert sum(len(json.dumps(s["maps"])) for s in thinned if s["maps"]) <= budget


def test_the_circuits_maps_count_in_the_budget_and_leave_with_their_snapshots_maps():
    with_circuits = [
        {**s, "circuits": {"positivity": {"ov": [[0.1 * k]]}, "maps": {"qk": "y" * 900}}}
        for k, s in enumerate(snapshots(5, 100))
    ]
    thinned = thin_maps(with_circuits, 2 * 1100)  # two snapshots' maps, the circuits' included
    assert [k for k, s in enumerate(thinned) if s["circuits"]["maps"] is not None] == [0, 4]
    assert [k for k, s in enumerate(thinned) if s["maps"] is not None] == [0, 4]
    assert [s["circuits"]["positivity"]["ov"][0][0] for s in thinned] == [0.1 * k for k in range(5)]


def test_the_title_names_the_runs_date():
    assert run_title(Path("outputs/2026-11-24/23-28-30")) == "2026-11-24 23-28-30"
    assert run_title(Path("outputs/multirun/2026-11-24/23-28-30/3")) == "2026-11-24 23-28-30 job 3"
    assert run_title(Path("/tmp/elsewhere/run")) == "run"


def test_the_history_reads_the_train_and_val_loss_from_the_runs_events(tmp_path):
    from src.training.tensorboard import TensorBoard

    logger = TensorBoard(tmp_path)  # tmp_path/tensorboard, as a run writes it
    for step in (0, 20):
        logger.log_metrics({"train/loss": 4.5 - step / 20, "val/loss": 4.0 - step / 10, "best_val_loss": 3.0}, step)
    logger.finalize("success")
    history = run_history(tmp_path)
    assert history["train_loss"] == [[0, 4.5], [20, 3.5]]
    assert history["val_loss"] == [[0, 4.0], [20, 2.0]]  # not the best so far (3.0)


def test_the_page_names_no_folder_of_the_machine_it_was_made_on(tmp_path):
    """Issue 47, item 6: the page is made to be shared; it carried the checkpoint's, the head scores' and
    the text's absolute paths."""
    from src.explorer.page import write_explorer
    from tests.explorer.browser import write_checkpoint

    vocab = sorted(set("First Citizen:\nBefore we proceed.\n"))
    checkpoint = tmp_path / "2026-11-24" / "23-28-30" / "checkpoints" / "best.ckpt"
    checkpoint.parent.mkdir(parents=True)
    config = {"kind": "gpt", "context_window": 8, "embedding_dim": 8, "num_heads": 2, "num_layers": 1}
    write_checkpoint(checkpoint, config, vocab)
    (checkpoint.parent.parent / "head_scores.json").write_text(json.dumps({"format": "scratchgpt head scores 1"}))
    text = tmp_path / "notes.txt"
    text.write_text("".join(vocab) * 3, encoding="utf-8")
    page = write_explorer(checkpoint, tmp_path / "page.html", tmp_path, text=str(text)).read_text(encoding="utf-8")
    assert str(tmp_path) not in page and "checkpoints/best.ckpt" in page and "characters of notes.txt" in page
