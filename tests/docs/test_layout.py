"""The import graph of src/ and benchmarks/ (read with ast): no circle, nothing imports back up the layers."""

import pytest

from benchmarks.layout import LAYERS, circles, import_graph, loaded_at_fit_start, place, upward
from src.run.cli import compose
from src.run.preflight import open_text


def test_no_import_circles():
    assert circles(import_graph("src", "benchmarks")) == []


def test_no_import_runs_back_up_the_layers():
    graph = import_graph("src", "benchmarks")
    assert upward(graph) == []
    assert all(place(m)[1] != "src" for m in graph if m != "src"), "a module of src/ is in no layer: add it to LAYERS"


def test_the_checks_see_circles_and_upward_imports():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    bottom, top = LAYERS[0][0], LAYERS[-3][0]
    assert upward({f"{bottom}.x": {f"{top}"}, f"{top}": {f"{bottom}.x"}}) == [(f"{bottom}.x", top)]
    assert upward({"src.evaluate": {"src.generate"}}) == [("src.evaluate", "src.generate")]  # one layer, two units


@pytest.mark.slow  # a tiny training run as a process
def test_a_run_from_scratch_loads_what_it_trains_with_and_not_what_it_uses_after():
    """`python -m src.train` at fit start: the sampler, the checkpoint reader, the explorer page, the
    figures and the sweep analysis are imported where they are used (a validation, a resume, the end);
    a sweep's jobs, resources and summary, the resume checks and the text's encoder only by a
    multirun, a resume and a cache miss."""
    open_text(compose("train", []).data)  # the text's token cache is there, as on every run but a text's first
    loaded = loaded_at_fit_start([])
    assert {"src/train.py", "src/training/gpt_module.py", "src/data/datamodule.py"} <= set(loaded)
    later = {"src/model/generation.py", "src/training/checkpoint.py", "src/explorer/page.py", "src/plots.py"}
    assert not later & set(loaded), later & set(loaded)
    assert "src/sweeps/analysis.py" not in loaded
    elsewhere = {
        *("src/sweeps/job.py", "src/sweeps/resources.py", "src/sweeps/summary.py", "src/sweeps/launcher.py"),
        *("src/run/resume.py", "src/data/token_encode.py"),
    }
    assert not elsewhere & set(loaded), elsewhere & set(loaded)
