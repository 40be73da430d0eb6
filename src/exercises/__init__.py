"""Exercises: write a piece of the notes yourself, graded by the project's own tests (docs/learn.md).

A learner's file is the reference's signature and docstring, with the notes' formula, its body removed.
use() binds the learner's version wherever src/'s loaded modules bind the reference, in this process
only and until restore(): nothing in src/ is ever written.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

from src.exercises.catalogue import EXERCISES, Exercise
from src.rules import ConfigError

VARIABLE = "SCRATCHGPT_EXERCISES"  # which exercises a process uses: "attention" or "softmax,attention"
FOLDER_VARIABLE = "SCRATCHGPT_EXERCISES_DIR"  # where the learner's files are (default: exercises/)
ROOT = Path(__file__).resolve().parents[2]


def exercise(name: str, where: str = "") -> Exercise:
    if name not in EXERCISES:
        raise ConfigError(f"{where}unknown exercise {name!r}: choose one of {', '.join(EXERCISES)}")
    return EXERCISES[name]


def learner_file(name: str) -> Path:
    return Path(os.environ.get(FOLDER_VARIABLE) or ROOT / "exercises") / f"{name}.py"


def _definition(tree: ast.Module, name: str) -> ast.FunctionDef | ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)


def _blank(lines: list[str], node: ast.FunctionDef, ex: Exercise, doc_fallback: str) -> list[str]:
    """A function's source with its body removed: signature, docstring (+ the notes), a raise. A
    leading `if ...fused...: return <kernel>` stays: the kernel path is not the notes' math."""
    body = node.body
    doc = ast.get_docstring(node) or doc_fallback
    if ast.get_docstring(node) is not None:
        body = body[1:]
    indent = " " * body[0].col_offset
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    signature = lines[start - 1 : node.body[0].lineno - 1]
    docstring = f"{doc}\n\n{ex.notes}".replace("\\", "\\\\")
    out = [*signature, textwrap.indent(f'"""{docstring}\n"""', indent)]
    first = body[0]
    if isinstance(first, ast.If) and "fused" in ast.unparse(first.test) and not first.orelse:
        out += lines[first.lineno - 1 : first.end_lineno]
    out.append(
        f"{indent}raise NotImplementedError(\n"
        f"{indent}    \"exercise {ex.name}, the notes' step '{ex.step}': write this body \"\n"
        f'{indent}    "(its docstring has the formula), then: make check-exercise NAME={ex.name}"\n'
        f"{indent})"
    )
    return out


def source(name: str, solution: bool = False) -> str:
    """The learner's file: blank (the exercise) or with the reference's own code (its solution)."""
    ex = exercise(name)
    module = importlib.import_module(ex.module)
    text = Path(module.__file__).read_text(encoding="utf-8")
    lines, tree = text.splitlines(), ast.parse(text)
    imports = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    imports += [ex.uses] if ex.uses else []
    target = _definition(tree, ex.reference)
    methods = " and ".join(ex.methods)
    what = f"{'the methods' if len(ex.methods) > 1 else 'the method'} {methods} of {ex.reference}"
    what = what if ex.methods else ex.reference
    header = [
        f"\"\"\"Exercise `{name}`: the notes' step '{ex.step}', written by you.",
        "",
        f"Write the body of {what} below: its docstring has the notes' formula.",
        f"    make check-exercise NAME={name}   the project's tests for it, run against this file",
        f"    make train-exercise NAME={name}   train the model with it, and compare with the reference",
        f"    make exercise-reset NAME={name}   start again from the blank",
        f"The reference is {ex.module.replace('.', '/')}.py; nothing here changes it.",
        '"""',
        "",
        *imports,
        "",
    ]
    parts = []  # a method's exercise: the learner's subclass of the reference, holding the methods
    if ex.methods:
        parts = [
            f"from {ex.module} import {ex.reference} as Reference{ex.reference}",
            "",
            "",
            f"class {ex.reference}(Reference{ex.reference}):",
            f'    """The reference\'s {ex.reference} with your {methods}; '
            'the rest (__init__ too) is the reference\'s."""',
        ]
    class_doc = (ast.get_docstring(target) or "").split("\n\n")[0]
    for node in [_definition(target, m) for m in ex.methods] or [target]:  # type: ignore[arg-type]
        body = lines[node.lineno - 1 : node.end_lineno] if solution else _blank(lines, node, ex, class_doc)
        parts += ["", *body]
    return "\n".join([*header, *parts]) + "\n"


def write(name: str, solution: bool = False) -> Path:
    path = learner_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source(name, solution), encoding="utf-8")
    return path


def load(name: str) -> Any:
    """The learner's version of the exercise: their function, or their subclass of the reference."""
    ex, path = exercise(name), learner_file(name)
    if not path.is_file():
        raise ConfigError(f"{VARIABLE}={name}: {path} does not exist: write it first with make exercise NAME={name}")
    spec = importlib.util.spec_from_file_location(f"scratchgpt_exercise_{name}", path)
    module: ModuleType = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except (Exception, SystemExit) as err:  # the learner's file: whatever it raises is theirs to see, in one line
        raise ConfigError(
            f"{path} does not load ({type(err).__name__}: {err}): fix it, or make exercise-reset NAME={name}"
        ) from None
    if not hasattr(module, ex.reference):
        raise ConfigError(f"{path} defines no {ex.reference}: keep its name, or make exercise-reset NAME={name}")
    return getattr(module, ex.reference)


_swapped: list[tuple[ModuleType, str, Any]] = []  # (module, name, the reference) for restore()


def _replace(old: Any, new: Any) -> None:
    """Every name bound to `old` in src/'s loaded modules (and the tests') is bound to `new`."""
    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] not in ("src", "tests") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is old:
                _swapped.append((module, attr, old))
                setattr(module, attr, new)


def use(names: list[str]) -> None:
    """Swap in the learner's versions of `names`, in the catalogue's order (a learner's attention
    then calls their own softmax), in this process, until restore()."""
    import src.model  # noqa: F401  every module of the model, loaded, so that every name is found
    import src.model.generation  # noqa: F401

    restore()  # twice in one process is once
    for name in [n for n in EXERCISES if n in names]:
        ex = EXERCISES[name]
        _replace(getattr(importlib.import_module(ex.module), ex.reference), load(name))


def restore() -> None:
    while _swapped:
        module, attr, old = _swapped.pop()
        setattr(module, attr, old)


def use_selected(fused: bool = False) -> list[str]:
    """Swap in the exercises SCRATCHGPT_EXERCISES names (comma-separated), each checked: what the
    runner and the grading plugin call before the model or the tests are built."""
    names = [n.strip() for n in os.environ.get(VARIABLE, "").split(",") if n.strip()]
    for name in names:
        exercise(name, f"{VARIABLE}: ")
    if names and fused:
        raise ConfigError(
            f"{VARIABLE}={','.join(names)} trains with your code on the plain path: add model.fused=false "
            f"(the fused kernels never call it)"
        )
    use(names)
    return names
