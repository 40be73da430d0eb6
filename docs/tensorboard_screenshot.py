"""Take the README's picture of TensorBoard: `python docs/tensorboard_screenshot.py [LOGDIR] [OUT]`.

Starts TensorBoard on LOGDIR (default: outputs) as `make tensorboard` does (`python -m src.watch`,
at a free port of 127.0.0.1), opens the address it prints in headless Chromium (Debian's
/usr/bin/chromium, or $CHROMIUM, driven by Playwright: no browser is downloaded), with
TensorBoard's other settings as they come, closes the settings pane, waits for the charts, and
saves what a user sees first as OUT (default: docs/tensorboard.png). `--tab hparams` (or any
tab's name) shows that tab instead, `--filter score_induction` only the tags matching it,
`--width 1900` a wider window. The README's picture is the TIME SERIES tab of one run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
HEIGHT = 760


def printed_address(server: subprocess.Popen) -> str:
    """The address `python -m src.watch` prints for a user to open."""
    for line in server.stdout:
        if found := re.search(r"open (http://\S+)", line):
            return found[1]
    sys.exit(f"error: python -m src.watch exited with status {server.wait()} before printing its address")


def wait_until_serving(url: str, server: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"error: tensorboard exited with status {server.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"error: tensorboard did not answer at {url} within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", nargs="?", default="outputs")
    parser.add_argument("out", nargs="?", default="docs/tensorboard.png")
    parser.add_argument("--tab", default="timeseries", help="timeseries, scalars, images, hparams, ...")
    parser.add_argument("--filter", default="", help="only the tags matching this (TensorBoard's tag filter)")
    parser.add_argument("--width", type=int, default=1280, help="the window's width in pixels")
    args = parser.parse_args()
    if not Path(args.logdir).is_dir():
        sys.exit(f"error: {args.logdir} is not a folder: train a run first (make train)")

    from playwright.sync_api import sync_playwright  # the dev extra installs it

    command = [sys.executable, "-m", "src.watch", args.logdir, "--host", "127.0.0.1", "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = printed_address(server)
        wait_until_serving(url, server)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"],
            )
            page = browser.new_page(viewport={"width": args.width, "height": HEIGHT})
            tags = f"&tagFilter={args.filter}" if args.filter else ""
            page.goto(f"{url}{tags}#{args.tab}")  # the address src.watch printed
            if args.tab == "timeseries":
                page.wait_for_selector("card-view", timeout=60_000)
                close = page.locator("button[aria-label='Close side pane']")
                if close.count():
                    close.first.click()  # the settings pane opens by default and hides a third of the charts
            page.wait_for_timeout(4_000)  # the charts draw after their data arrive
            page.screenshot(path=args.out)
            browser.close()
    finally:
        server.terminate()
        server.wait()
    print(f"{args.out}: {Path(args.out).stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main()
