"""Every command and snippet of README.md and docs/ runs as written (issue 47): each `python -m src.<command>`
line of a code block is composed by the command's own pre-check, so a renamed key or option in the docs
fails here; docs/export.md's Python runs offline against a tiny run and its exports, named as the page
names them, and the export's closing lines run as printed; the other pages' Python prints what its comments say."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import socket
from pathlib import Path

import pytest

from src.run.cli import check_command_line
from src.run.config import register
from tests.helpers import ROOT, block_network, command_state, run_main_offline, tiny_training

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# The module a line runs -> the config its command composes (src.exercises.run is train with your pieces).
CONFIGS = {"src.exercises.run": "train", "src.export": "export"}
RUN = Path("outputs/2026-11-24/17-26-00")  # the run directory docs/export.md's snippets name


def code_blocks(page: Path, *languages: str) -> list[str]:
    return [body for language, body in BLOCK.findall(page.read_text(encoding="utf-8")) if language in languages]


def command_lines() -> list[tuple[str, str]]:
    """(page, line) for each line of a shell block that runs `python -m src.`, continuation lines joined.
    A synopsis with placeholders (`<folder>`) is not a command to run as written."""
    found = []
    for page in PAGES:
        for block in code_blocks(page, "bash", "sh", ""):
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip().startswith("python -m src.") and "<" not in line:
                    found.append((str(page.relative_to(ROOT)), line.strip()))
    return found


LINES = command_lines()


def test_the_docs_have_command_lines_to_check():
    assert len(LINES) >= 20 and {line.split()[2] for _, line in LINES} >= {"src.train", "src.generate", "src.export"}


@pytest.mark.parametrize(("page", "line"), LINES, ids=[f"{p}: {line[:60]}" for p, line in LINES])
def test_every_documented_command_line_composes(page: str, line: str, capsys):
    expanded = re.sub(r"\$\([^)]*\)|\$\$|\$\w+", "1", line)  # what the shell expands: $(hostname), $$, $VAR
    module, *argv = shlex.split(expanded, comments=True)[2:]
    import_module = {"src.export": "src.export.__main__"}.get(module, module)
    __import__(import_module)  # a command other than train stores its schema when imported
    config = CONFIGS.get(module, module.removeprefix("src."))
    with command_state():
        register(config)
        try:
            check_command_line(config, argv, check=None)
        except SystemExit:
            pytest.fail(f"{page}: `{line}` is refused: {capsys.readouterr().err.strip()}")


ELSEWHERE = [(page, block) for page in PAGES if page.name != "export.md" for block in code_blocks(page, "python")]


@pytest.mark.parametrize(("page", "block"), ELSEWHERE, ids=[str(p.relative_to(ROOT)) for p, _ in ELSEWHERE])
def test_the_python_of_the_other_pages_prints_what_its_comments_say(page: Path, block: str):
    """`print(x)  # what it prints`: the comment is what a reader will see."""
    printed, _ = run_python(block)
    promised = re.findall(r"^print\(.*\)\s+#\s*(.+)$", block, flags=re.MULTILINE)
    assert promised and all(text.strip() in printed for text in promised), printed


LIBRARIES = ("transformers", "src.export.lens", "mlflow")  # what each Python block of docs/export.md opens


def python_blocks() -> list[str]:
    return code_blocks(ROOT / "docs" / "export.md", "python")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A folder laid out as docs/export.md's snippets expect: a tiny run at RUN (its window 64, the
    default, logged to TensorBoard, CSV and MLflow), exported as gpt2-chars (hf) and lens; with the
    closing lines of the run and of each export."""
    root = tmp_path_factory.mktemp("docs")
    overrides = ["model.context_window=64", "trainer.max_steps=4", "trainer.val_check_interval=2", "explorer=false"]
    overrides += ["sample.max_new_tokens=0", "logger=many", "~logger.wandb", f"hydra.run.dir={root / RUN}"]
    trained = run_main_offline("train", *tiny_training(root / "outputs", *overrides))
    assert trained.returncode == 0, trained.stderr[-3000:]
    said = {"train": trained.stdout}  # the run's log
    for fmt, out in (("hf", "gpt2-chars"), ("transformerlens", "lens")):
        result = run_main_offline("export", f"ckpt_path={root / RUN}", f"format={fmt}", f"out={root / out}")
        assert result.returncode == 0, result.stderr[-3000:]
        said[fmt] = result.stdout
    return root, said


@pytest.fixture
def offline(monkeypatch, exported):
    monkeypatch.chdir(exported[0])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, getattr(socket.socket, name))
    monkeypatch.setattr(socket, "getaddrinfo", socket.getaddrinfo)
    block_network()


def run_python(code: str) -> tuple[str, dict]:
    """Run a snippet as a reader pastes it: what it prints, and the names it defines."""
    printed, names = io.StringIO(), {"__name__": "__snippet__"}
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "<snippet>", "exec"), names)
    return printed.getvalue(), names


@pytest.mark.slow
def test_the_python_of_docs_export_md_runs_as_written(exported, offline):
    """The transformers snippet generates past GPT-2's 64 positions by sliding; the TransformerLens one
    caches every layer; the MLflow one reads the run's val loss with what the trackers extra installs."""
    blocks = {name: block for block in python_blocks() for name in LIBRARIES if f"from {name} import" in block}
    printed, _ = run_python(blocks["transformers"])
    in_window, slid = printed[:64], printed[65:-1]  # generate's 64 characters; the prompt and 100 slid ones
    assert len(printed) == 64 + 1 + 6 + 100 + 1 and in_window.startswith("ROMEO:")
    assert slid[:64] == in_window  # sliding is generate itself while the window holds the text
    _, names = run_python(blocks["src.export.lens"])
    assert names["cache"]["pattern", 0].shape == (1, 2, 6, 6)  # tiny_training's 2 heads: (batch, heads, T, T)
    printed, _ = run_python(blocks["mlflow"])
    assert set(ast.literal_eval(printed)) == {0, 2, 4}  # the val loss before training and at each validation
    assert len(python_blocks()) == len(blocks)  # a new block: say here what it must do


@pytest.mark.slow
def test_the_exports_closing_lines_say_the_window_and_run_as_printed(exported, offline):
    _, said = exported
    names = {}
    for fmt in ("hf", "transformerlens"):
        (closing,) = [line for line in said[fmt].splitlines() if line.startswith("wrote ")]
        assert "n_positions=64" in closing and "slides the window" in closing
        names |= run_python(closing.split("open it with: ", 1)[1])[1]
    ids = names["tokenizer"]("ROMEO:", return_tensors="pt").input_ids
    assert names["model"](ids).logits.shape == (1, 6, names["tokenizer"].vocab_size)
    tokens = names["bridge"].to_tokens("ROMEO:")
    assert tokens.tolist() == ids.tolist()  # no BOS prepended, no id past the vocabulary
    logits, _ = names["bridge"].run_with_cache(tokens)
    assert logits.shape == (1, 6, names["tokenizer"].vocab_size)


@pytest.mark.slow
def test_a_run_logged_to_csv_and_mlflow_ends_saying_where_the_metrics_went(exported):
    root, said = exported
    log = [line for line in said["train"].splitlines() if line.strip()]
    lines = [line for line in log if "metrics (logger=" in line]
    assert len(lines) == 2 and "watch it: " in log[-1], said["train"][-2000:]  # TensorBoard's line stays last
    csv, mlflow = (next(line for line in lines if f"logger={name}" in line) for name in ("csv", "mlflow"))
    assert str(root / RUN / "csv" / "metrics.csv") in csv
    assert f"sqlite:///{root / RUN / 'mlflow' / 'mlflow.db'}" in mlflow and "pip install mlflow" in mlflow
