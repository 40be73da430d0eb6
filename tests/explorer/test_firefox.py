"""The page in Firefox ESR (issue 36): Debian's firefox-esr, which Playwright cannot drive (it drives
only its own patched Firefox). The test serves the page over a local HTTP server, Firefox opens it
headless with `?report=<text>`, and the page posts its next-character distribution for that text
back to the server (a form: the page's policy refuses connections); it must equal PyTorch's to
1e-5. A `--screenshot` of the page shows that it renders (copied to $SCRATCHGPT_KEEP_SCREENSHOT
when that is set, to look at)."""

from __future__ import annotations

import functools
import json
import os
import queue
import shutil
import subprocess
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from src.explorer.page import write_explorer
from src.training.checkpoint import load_trained
from tests.explorer.browser import write_checkpoint

VOCAB = sorted(set("First Citizen:\nBefore we proceed any further, hear me speak.\n"))
MODEL = {"kind": "gpt", "context_window": 16, "embedding_dim": 16, "num_heads": 4, "num_layers": 2}
TEXT = "Before we proceed any further"


def firefox_path() -> str:
    found = shutil.which("firefox-esr")
    if found is None:
        raise RuntimeError("Firefox ESR is not installed: apt-get install firefox-esr (Debian's package)")
    return found


class Reports(SimpleHTTPRequestHandler):
    """Serves the page's folder; a POST to /report is the page's answer, put on the server's queue."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self.server.reports.put(json.loads(urllib.parse.parse_qs(body)["data"][0]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


def serve(folder: Path) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Reports, directory=str(folder)))
    server.reports = queue.Queue()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def firefox(profile: Path, *args: str) -> subprocess.Popen:
    profile.mkdir()
    env = {**os.environ, "MOZ_HEADLESS": "1", "HOME": str(profile)}
    command = [firefox_path(), "--headless", "--no-remote", "--profile", str(profile), *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def torch_probs(checkpoint: Path, text: str) -> torch.Tensor:
    trained = load_trained(checkpoint)
    window = "".join(ch for ch in text if ch in trained.tokenizer.index)[-trained.model.context_window :]
    with torch.no_grad():
        logits, _ = trained.model(trained.tokenizer.encode(window).unsqueeze(0))
    return torch.softmax(logits[0, -1].double(), -1)


@pytest.mark.slow
def test_firefox_esr_renders_the_page_and_computes_pytorch_s_distribution(tmp_path):
    checkpoint = tmp_path / "best.ckpt"
    write_checkpoint(checkpoint, MODEL, VOCAB, spread=0.3)
    text = tmp_path / "text.txt"
    text.write_text("".join(VOCAB) * 3, encoding="utf-8")
    page = write_explorer(checkpoint, tmp_path / "page.html", tmp_path, text=str(text))
    server = serve(tmp_path)
    base = f"http://127.0.0.1:{server.server_address[1]}/{page.name}"
    browser = firefox(tmp_path / "profile", base + "?report=" + urllib.parse.quote(TEXT))
    try:
        report = server.reports.get(timeout=120)
    finally:
        browser.kill()
        browser.wait()
    assert "Firefox" in report["userAgent"]
    assert report["kernel"] == "WebAssembly SIMD"  # the page's policy lets Firefox compile kernel.js
    got = torch.tensor(report["probs"], dtype=torch.float64)
    expected = torch_probs(checkpoint, TEXT)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)
    assert got.topk(3).indices.tolist() == expected.topk(3).indices.tolist()

    shot = tmp_path / "firefox.png"
    taking = firefox(tmp_path / "profile-shot", "--screenshot", str(shot), "--window-size=1200,1600", base)
    taking.wait(timeout=120)
    server.shutdown()
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one (a blank PNG is ~5 kB)
    if os.environ.get("SCRATCHGPT_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["SCRATCHGPT_KEEP_SCREENSHOT"])
