"""The import graph of src/ and benchmarks/ (read with ast): no circle, nothing imports back up the layers."""

from benchmarks.layout import LAYERS, circles, import_graph, place, upward


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
