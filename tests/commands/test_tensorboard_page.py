"""The real TensorBoard as `make tensorboard` starts it (`python -m src.watch`), on a tiny run, in
headless Chromium, at the one address it prints: the first screen shows the val loss the run printed,
the runs list names one run per training run, a chart per head, the HPARAMS metrics within 1280 px
(issue 36, items 8, 9 and 12; issue 32; issue 47, item 2). Screenshots of each tab go to tmp_path."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

from src.training.tensorboard import HPARAMS_METRICS, TensorBoard
from tests.helpers import ROOT, scalars

pytestmark = pytest.mark.slow  # a server and a browser

CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 800  # the laptop screen


@contextmanager
def tensorboard(logdir: Path) -> Iterator[str]:
    """TensorBoard as `make tensorboard` starts it, on a free port; the address it prints for a user."""
    command = [sys.executable, "-m", "src.watch", str(logdir), "--host", "127.0.0.1", "--port", "0"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        printed = server.stdout.readline()  # its first line: where to look
        found = re.fullmatch(r"TensorBoard on \S+: open (http://\S+) \(the curves unsmoothed: .*\)\n", printed)
        assert found and found[1].endswith("/?smoothing=0"), printed
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"src.watch exited with {server.returncode}"
            try:
                urllib.request.urlopen(found[1], timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "tensorboard did not answer"
                time.sleep(0.5)
        yield found[1]
    finally:
        server.terminate()
        server.wait()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


def cards(page: Page) -> list[dict]:
    """TIME SERIES' cards in page order: title (the tag), where, and the rows of the table under the
    chart (one per run: its name, then Value, Step, ...; with smoothing, Smoothed before Value)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('card-view')].map(card => {
            const box = card.getBoundingClientRect();
            const lines = card.innerText.split('\\n').map(line => line.trim());
            const title = lines[1] && lines[1].startsWith('/') ? lines[0] + lines[1] : lines[0];
            const rows = [...card.querySelectorAll('tb-data-table-content-row')].map(row =>
                [...row.querySelectorAll('tb-data-table-content-cell')].map(cell => cell.innerText.trim())
                    .filter(text => text));
            return {title, top: box.top, left: box.left, rows};
        })"""
    )


def wait_for_tables(page: Page, *titles: str) -> dict[str, dict]:
    """The cards named `titles` once each one's table has its rows."""
    page.wait_for_function(
        """titles => titles.every(t => [...document.querySelectorAll('card-view')].some(card => {
            const lines = card.innerText.split('\\n').map(line => line.trim());
            const title = lines[1] && lines[1].startsWith('/') ? lines[0] + lines[1] : lines[0];
            return title === t && card.querySelector('tb-data-table-content-row');
        }))""",
        arg=list(titles),
        timeout=120_000,
    )
    return {card["title"]: card for card in cards(page)}


def test_the_first_screen_shows_train_and_val_loss_and_the_val_loss_the_run_printed(trained, browser, tmp_path):
    run_dir, printed = trained
    (last_step, last_val), *_ = reversed(scalars(run_dir)["loss/val"])
    assert f"val loss {last_val:.4f}" in printed  # the number the run printed
    with tensorboard(run_dir.parent) as url:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{url}#timeseries")
        shown = wait_for_tables(page, "loss/train", "loss/val", "loss/val_best")
        page.wait_for_timeout(2_000)  # the lines draw after their data arrive
        page.screenshot(path=tmp_path / "timeseries.png")
        assert [card["title"] for card in cards(page)][:3] == ["loss/train", "loss/val", "loss/val_best"]
        val = shown["loss/val"]
        assert val["top"] < HEIGHT / 2 and shown["loss/train"]["top"] == val["top"]  # side by side, on screen
        # The table under each chart, unsmoothed (no Smoothed column): one row, the training run's
        for title in ("loss/val", "loss/val_best"):
            (row,) = shown[title]["rows"]
            value, step = row[1:3]
            assert float(value) == pytest.approx(last_val, abs=5e-5) and int(step) == last_step, row


def test_one_run_per_training_run_and_a_chart_per_head(trained, browser, tmp_path):
    """Issue 47: every run was 7 TensorBoard runs (its events, val, best, head_0..3), ~35 names after
    three runs; the head-score charts mixed every run's head_k."""
    run_dir, _ = trained
    with tensorboard(run_dir.parent) as url:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{url}&tagFilter=score_induction#timeseries")
        heads = [f"score_induction/L{layer}H{head}" for layer in (0, 1) for head in (0, 1)]
        shown = wait_for_tables(page, *heads)
        page.screenshot(path=tmp_path / "head_scores.png")
        for title in heads:
            (row,) = shown[title]["rows"]  # the run's one line
            assert row[0] == run_dir.name + "/tensorboard", row
        runs = page.evaluate("() => [...document.querySelectorAll('.run-color-swatch')].length")
        assert runs == 1  # the runs list: this training run, once


def test_the_attention_images_are_there_from_step_0(trained, browser, tmp_path):
    run_dir, _ = trained
    with tensorboard(run_dir.parent) as url:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{url}#images")
        page.get_by_text("maps/attention_layer_0").first.wait_for(timeout=120_000)
        page.wait_for_timeout(3_000)
        page.screenshot(path=tmp_path / "images.png")
        assert page.get_by_text("maps/heads_at_a_glance").count() >= 1


@pytest.mark.parametrize(
    ("jobs", "varied"),
    [(1, []), (2, ["model.embedding_dim", "seed"])],
    ids=["a plain run", "a sweep of two keys"],
)
def test_hparams_shows_the_metrics_within_1280_px(browser, tmp_path, jobs, varied):
    for job in range(jobs):  # what a run writes: its session, then a metric at each validation
        logger = TensorBoard(tmp_path / "logs" / str(job))
        params = {"model": {"embedding_dim": 16 * (job + 1), "num_heads": 2}, "data": {"path": "input.txt"}}
        logger.log_session({**params, "seed": job, "parameters": 1000 * (job + 1)}, varied, trial=f"12-00-00/{job}")
        logger.log_metrics({"best_val_loss": 2.0 - job / 10, "val/bpc": 2.9 - job / 10, "val/acc": 0.4 + job / 10}, 20)
        logger.finalize("success")
    with tensorboard(tmp_path / "logs") as url:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{url}#hparams")
        page.get_by_text("best val loss").first.wait_for(timeout=120_000)
        page.get_by_text(f"12-00-00/{jobs - 1}").first.wait_for()
        page.screenshot(path=tmp_path / "hparams.png")
        for *_, title in HPARAMS_METRICS:  # the table's header row (the filters on the left name them too)
            boxes = [element.bounding_box() for element in page.get_by_text(title, exact=True).all()]
            header = [box for box in boxes if box and box["width"] > 0 and box["y"] < 200]
            assert len(header) == 1 and header[0]["x"] + 60 <= WIDTH, (title, boxes)  # its numbers are on screen
