"""The real `tensorboard` on a tiny run, in headless Chromium, at the address a run prints (VIEW):
the first screen shows the val loss the run printed, a colour per head, the HPARAMS metrics
within 1280 px (issue 36, items 8, 9 and 12; issue 32). Screenshots of each tab go to tmp_path."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

from src.training.tensorboard import HPARAMS_METRICS, VIEW, TensorBoard
from tests.helpers import scalars

pytestmark = pytest.mark.slow  # a server and a browser

CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 800  # the laptop screen
QUERY = VIEW.split("/", 3)[3]  # "?smoothing=0": what the run's last line adds to TensorBoard's address


@contextmanager
def tensorboard(logdir: Path) -> Iterator[str]:
    """TensorBoard as `make tensorboard` starts it, on a free port; its address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    program = Path(sys.executable).with_name("tensorboard")
    command = [str(program), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"tensorboard exited with {server.returncode}"
            try:
                urllib.request.urlopen(url, timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "tensorboard did not answer"
                time.sleep(0.5)
        yield url
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
        page.goto(f"{url}{QUERY}#timeseries")
        shown = wait_for_tables(page, "loss/train", "loss/val")
        page.wait_for_timeout(2_000)  # the lines draw after their data arrive
        page.screenshot(path=tmp_path / "timeseries.png")
        assert [card["title"] for card in cards(page)][:2] == ["loss/train", "loss/val"]  # the first row
        val = shown["loss/val"]
        assert val["top"] < HEIGHT / 2 and shown["loss/train"]["top"] == val["top"]  # side by side, on screen
        # The table under the chart, unsmoothed (no Smoothed column): the val run's line and the best so far
        runs = {row[0].rsplit("/", 1)[-1]: row[1:] for row in val["rows"]}
        assert set(runs) == {"val", "best"}, val["rows"]
        for value, step in (runs["val"][:2], runs["best"][:2]):
            assert float(value) == pytest.approx(last_val, abs=5e-5) and int(step) == last_step, val["rows"]


def test_every_head_of_a_layer_has_its_own_colour_in_one_chart(trained, browser, tmp_path):
    run_dir, _ = trained
    with tensorboard(run_dir.parent) as url:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{url}{QUERY}&tagFilter=score_induction#timeseries")
        shown = wait_for_tables(page, "score_induction/layer_0", "score_induction/layer_1")
        page.screenshot(path=tmp_path / "head_scores.png")
        for layer in (0, 1):
            rows = shown[f"score_induction/layer_{layer}"]["rows"]
            assert sorted(row[0].rsplit("/", 1)[-1] for row in rows) == ["head_0", "head_1"], rows  # a line per head
        colours = page.evaluate(
            """() => [...document.querySelectorAll('.run-color-swatch')].map(
                swatch => getComputedStyle(swatch).backgroundColor)"""
        )
        assert len(colours) == 5 and len(set(colours)) == 5, colours  # the run, val, best and two heads: five colours


def test_custom_scalars_draws_train_val_and_the_best_in_three_colours_and_a_colour_per_head(trained, browser, tmp_path):
    """Issue 36: the train and val loss chart drew both in one colour (the run's), markers apart."""
    run_dir, _ = trained
    with tensorboard(run_dir.parent) as url:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{url}#custom_scalars")
        page.get_by_text("train and val loss").wait_for(timeout=120_000)
        page.get_by_text("head scores").first.wait_for()
        page.wait_for_timeout(3_000)  # the lines draw after their data arrive
        page.screenshot(path=tmp_path / "custom_scalars.png")
        assert page.get_by_text("Matches (4)").count() >= 1  # induction: 2 layers x 2 heads, each a series
        # The loss chart's legend ("Matches"): each series as "<tag> (<run>)", written in its line's colour
        chart = page.locator("tf-custom-scalar-multi-line-chart-card", has_text="train and val loss")
        entries = chart.locator(".match-list-entry")
        entries.first.wait_for(state="attached")
        colour = {}
        for k in range(entries.count()):
            tag, run = re.search(r"(loss/\w+) \((.+)\)", entries.nth(k).text_content()).groups()
            colour[tag, run.rsplit("/", 1)[-1]] = entries.nth(k).evaluate("e => getComputedStyle(e).color")
        assert set(colour) == {("loss/train", "tensorboard"), ("loss/val", "val"), ("loss/val", "best")}, colour
        assert len(set(colour.values())) == 3, colour  # train, val and the best so far: a colour each


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
