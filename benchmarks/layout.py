"""`python -m benchmarks.layout`: how src/ is laid out, in numbers.

- what one training run has loaded of src/ when fit starts (files and lines), read from
  sys.modules by a callback inside the real command `python -m src.train`;
- the import graph of src/ and benchmarks/ (every `import`, also inside functions, read with ast):
  its circles, and the imports that run back up the layers below (LAYERS, lowest first).

tests/docs/test_layout.py keeps the graph free of circles and upward imports.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Lowest first. A module may import from its own package (or itself) and from lower layers only;
# two modules of one layer that are not in one package may not import each other either.
LAYERS: list[tuple[str, ...]] = [
    ("src.model",),  # the math: attention, layers, GPT and SeedGPT, sampling, their limits (torch only)
    ("src.rules",),  # every other rule a value must follow, written once (no Lightning or Hydra)
    ("src.exercises",),  # a learner's own pieces of the notes, swapped in for the reference's
    ("src.data",),  # the text: corpus, tokenizer, token cache, windows, DataModule
    ("src.sweeps.analysis",),  # after a sweep: seed groups, the fit, the tables (numbers only)
    ("src.sweeps.isoflop",),  # after an isoFLOP sweep: the parabolas, the optima, the exponents (numbers only)
    ("src.plots",),  # figures of attention: TensorBoard's maps, plot_attention's PNG
    ("src.sweeps.figure",),  # a sweep's summary.png, drawn from the analysis' numbers
    ("src.training",),  # the Lightning pieces: GPTModule, callbacks, checkpoints, optimizer
    ("src.explorer",),  # the explorer page: a checkpoint's model running in one HTML file
    ("src.trackers",),  # logger=csv, mlflow, wandb, many: the trackers beside TensorBoard
    ("src.cluster",),  # the cluster wing: torchrun's ranks meeting, SLURM's requeue, a lost DDP rank
    ("src.run.record",),  # a run's result.json
    ("src.run.points",),  # a multirun's command line, points, swept keys and job names
    ("src.run.rundir",),  # a run's folder, ranks and lock; a command typed again into it
    ("src.sweeps.resources",),  # a parallel sweep's jobs sharing the machine: threads, GPU slots
    ("src.sweeps.summary",),  # a multirun's main process: its start, its stop, its summary
    ("src.sweeps.job", "src.sweeps.checks"),  # a job; the points
    ("src.sweeps.launcher",),  # hydra/launcher=parallel: the pool of workers, signals passed on
    ("src.sweeps",),  # the Hydra callback every run instantiates
    ("src.run.config",),  # train's schemas and --help
    ("src.run.resume",),  # what a resumed run checks of its checkpoint
    ("src.run.preflight", "src.run.cli"),  # the checks before a run; what every command shares
    ("src.run.finish",),  # how a run ends, or stops, in one line
    # the commands
    ("src.train", "src.evaluate", "src.generate", "src.plot_attention", "src.explore", "src.export", "src.compare"),
    ("src.watch",),  # TensorBoard on the runs, at the address that shows what they printed
    ("src.exercises.run",),  # python -m src.train with the learner's pieces swapped in
    ("benchmarks",),
    ("src", "tests"),  # unknown modules sit on top, so that they are seen
]
TINY_RUN = [
    *("model.num_layers=1", "model.embedding_dim=32", "model.context_window=16", "data.batch_size=4"),
    *("trainer.max_steps=2", "trainer.val_check_interval=2", "data.val_tokens=64", "sample.max_new_tokens=20"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def imported(tree: ast.AST, modules: set[str]) -> set[str]:
    """The project's modules an ast imports (a name of a package that is a module counts as that module)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []  # annotations only: nothing is imported when the program runs
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
    return {name for name in found if name in modules}


def import_graph(*folders: str) -> dict[str, set[str]]:
    """module -> the project modules it imports, over the .py files of `folders`."""
    files = {module_name(path): path for path in python_files(*folders)}
    graph = {}
    for name, path in files.items():
        targets = imported(ast.parse(path.read_text()), set(files))
        # `from src.model.gpt import GPT` names src.model too; only the deepest module is the edge
        graph[name] = {t for t in targets if not any(o.startswith(t + ".") for o in targets) and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            component.append(node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def place(module: str) -> tuple[int, str]:
    """A module's layer and its unit there (the LAYERS entry it falls under)."""
    matches = [(rank, prefix) for rank, layer in enumerate(LAYERS) for prefix in layer]
    return max(((r, p) for r, p in matches if (module + ".").startswith(p + ".")), key=lambda rp: len(rp[1]))


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a higher layer, or of another unit of the same layer."""
    wrong = []
    for source, targets in sorted(graph.items()):
        rank, unit = place(source)
        for target in sorted(targets):
            target_rank, target_unit = place(target)
            if target_rank > rank or (target_rank == rank and target_unit != unit):
                wrong.append((source, target))
    return wrong


def loaded_at_fit_start(overrides: list[str]) -> dict[str, int]:
    """src/ file -> its lines, for the files `python -m src.train <overrides>` has loaded when fit starts."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "loaded.json"
        command = [
            *(sys.executable, "-m", "src.train", *TINY_RUN, *overrides, f"paths.log_dir={tmp}"),
            *("+callbacks.layout._target_=benchmarks.layout.LoadedAtFitStart", f"+callbacks.layout.out={out}"),
        ]
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        return json.loads(out.read_text())


def src_files_loaded() -> dict[str, int]:
    """The files of src/ in this process's sys.modules, each with its number of lines."""
    files = {Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    src = (ROOT / "src").resolve()
    return {str(f.relative_to(ROOT)): len(f.read_text().splitlines()) for f in sorted(files) if f.is_relative_to(src)}


def _callback_class() -> Any:
    import lightning as L

    class LoadedAtFitStart(L.Callback):
        """Writes src_files_loaded() to `out` as fit starts."""

        def __init__(self, out: str):
            self.out = out

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            Path(self.out).write_text(json.dumps(src_files_loaded()))

    return LoadedAtFitStart


def __getattr__(name: str) -> Any:  # Lightning only for the run's callback, not for the graph
    if name == "LoadedAtFitStart":
        return _callback_class()
    raise AttributeError(name)


def main() -> None:
    all_src = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in python_files("src")}
    loaded = loaded_at_fit_start(sys.argv[1:])
    print(
        f"one run (`python -m src.train` {' '.join(sys.argv[1:]) or 'with a tiny model'}) has loaded at fit start "
        f"{len(loaded)} of src/'s {len(all_src)} files, {sum(loaded.values()):,} of {sum(all_src.values()):,} lines"
    )
    print("  not loaded: " + ", ".join(sorted(set(all_src) - set(loaded))))
    graph = import_graph("src", "benchmarks")
    found = circles(graph)
    print(f"import circles: {len(found)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
    wrong = upward(graph)
    print(f"imports that run back up the layers: {len(wrong)}" + "".join(f"\n  {a} -> {b}" for a, b in wrong))


if __name__ == "__main__":
    main()
