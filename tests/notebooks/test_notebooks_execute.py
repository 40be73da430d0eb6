"""Every notebook under notebooks/ runs top to bottom in a fresh kernel, with no network, and is committed
without outputs. A cell that raises fails the test, naming the cell."""

from __future__ import annotations

import json
import re

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers import ROOT, shakespeare_file

NOTEBOOKS = ROOT / "notebooks"


def execute(name: str, timeout: float = 120) -> list[str]:
    """Run notebooks/<name> in a fresh kernel started in notebooks/ (as Jupyter does); return each code
    cell's text output (streams and text/plain), in order."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}
    )
    client.execute()
    outputs = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            texts = [o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs]
            kinds = [k for o in cell.outputs for k in o.get("data", {})]
            outputs.append("".join(texts) + "".join(f"\n[{k}]" for k in kinds if k != "text/plain"))
    return outputs


def test_every_notebook_is_committed_without_outputs():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == ["01_the_notes_executed.ipynb", "02_your_run_inspected.ipynb"]
    for name in names:
        notebook = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
        for cell in notebook["cells"]:
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None, f"{name}: strip its outputs"


@pytest.mark.slow
def test_the_notes_notebook_prints_the_notes_numbers_and_trains_their_model(monkeypatch):
    shakespeare_file()  # set-up placed the corpus: the notebook reads data/tinyshakespeare/input.txt
    monkeypatch.setenv("SCRATCHGPT_NOTEBOOK_STEPS", "200")  # a minute by default; a few seconds here
    out = "\n".join(execute("01_the_notes_executed.ipynb"))
    assert "the code:        tensor([0.2645, 0.2645, 0.4711, 0.0000])" in out  # the notes' [0.265, 0.265, 0.47, 0]
    assert "out: (2, 5, 4)" in out and "weights: (2, 5, 5)" in out  # trace_shapes
    assert "[0., 0., 0., 0., -inf]" in out  # the mask of n = 5, its fourth row
    leak = float(re.search(r"leak: the future moved a past weight by (\S+)", out).group(1))
    assert abs(leak) > 0.01
    assert "split_heads: (1, 2, 4, 3)" in out and "merge_heads, the heads concatenated: (1, 4, 6)" in out
    first = float(re.search(r"step 0: val loss (\S+)", out).group(1))
    last = float(re.search(r"step 200: val loss (\S+)", out).group(1))
    assert last < first / 2  # the notes' randn weights start far above ln 65; 200 steps of SGD halve it
    assert "To be or not " in out and "[image/png]" in out  # the sample and the attention figure


@pytest.mark.slow  # opens the session's tiny training run (a process)
def test_the_run_notebook_opens_a_run_and_shows_its_curve_sample_page_and_attention(trained, monkeypatch):
    run_dir, _ = trained
    monkeypatch.setenv("SCRATCHGPT_RUN", str(run_dir))
    which, curve, sample, page, attention, heads = execute("02_your_run_inspected.ipynb")[2:]
    assert f"checkpoint: {run_dir}/checkpoints/best.ckpt (step 40" in which
    assert "[image/png]" in curve and "[image/png]" in attention
    assert sample.startswith("ROMEO:") and len(sample.strip()) > 300
    assert "explore.html" in page and "[text/html]" in page
    assert len(re.findall(r"^ +[01] +[01] ", heads, re.M)) == 4  # 2 layers x 2 heads, scored
    assert re.search(r"in-context score on the probe: [-+]\d", heads)
