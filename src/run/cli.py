"""What every command shares: the command line composed and checked before Hydra runs it (and
creates a run directory), and bad input (a ValueError or OSError naming the fix) ended as one line,
`error: <message>`, exit status 2; `HYDRA_FULL_ERROR=1` shows full traces."""

from __future__ import annotations

import copy
import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException
from tqdm import tqdm

from src.model import checks
from src.rules import one_line
from src.run import rundir  # its import registers the resolvers of the run's folder, before any composing
from src.run.config import CONFIG_DIR, command_help, options, register

os.environ.setdefault("PROJECT_ROOT", str(rundir.PROJECT_ROOT))  # conf/paths reads it
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError)

# Known, harmless warnings of the pinned libraries, silenced here and nowhere else.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")  # Lightning 2.6 on torch 2.13
# Lightning suggests worker processes for the validation loader; its batches are slices of one
# in-memory tensor, which workers would only slow down.
warnings.filterwarnings("ignore", message=".*does not have many workers.*")
# Attention maps of a text whose characters the plotting font lacks (CJK, emoji): the labels
# show as boxes, the heat maps are unaffected; one warning per character would flood the log.
warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
# Resuming a run writes into its checkpoint directory on purpose.
warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
# On a machine where SLURM is installed (a cluster's login node), Lightning hints "prepend srun" to every
# run; outside an allocation there is nothing to prepend it to. Inside one (SLURM_JOB_ID) the hint stays.
if "SLURM_JOB_ID" not in os.environ:
    warnings.filterwarnings("ignore", message="The `srun` command is available on your system but is not used")


def fail(message: str, status: int = 2) -> None:
    """`error: <message>` on stderr, and in the run's train.log when a run has one open; then exit."""
    line = f"error: {message}"
    logging.raiseExceptions = False  # a log that cannot take the line (a full disk) adds no traceback to it
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.emit(logging.makeLogRecord({"msg": line, "levelno": logging.ERROR, "levelname": "ERROR"}))
    print(line, file=sys.stderr)
    if rundir.launched_run() is not None:  # torchrun's other ranks, waiting for this one, end with this line
        from src.cluster.meeting import post_failure

        post_failure(message)
    sys.exit(status)


class ConsoleHandler(logging.StreamHandler):
    """Hydra's console log handler, printing above a progress bar (tqdm.write), not onto its line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # as logging's own handlers do: a broken stream must not stop the run
            self.handleError(record)


@contextmanager
def composer(config_name: str, with_hydra: bool = False) -> Iterator[Callable[[list[str]], DictConfig]]:
    """compose(overrides) for several command lines, Hydra initialised once for all of them;
    with_hydra: the `hydra` node too (hydra.run.dir, the job's logging), as Hydra would run it."""
    register(config_name)
    with hydra.initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name=config_name):
        yield lambda overrides: hydra.compose(config_name, overrides, return_hydra_config=with_hydra)


def compose(config_name: str, overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The config a command line would give, without running anything (see composer)."""
    with composer(config_name, with_hydra) as compose_one:
        return compose_one(overrides)


def job_config(cfg: DictConfig) -> DictConfig:
    """The job's config (without `hydra`) of a single run, its directory fixed now (${now:...} or the
    torchrun/SLURM folder) and set in HydraConfig, as Hydra's run would (command() restores it)."""
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        if cfg.hydra.mode is None:
            cfg.hydra.mode = RunMode.RUN
    run_dir = str(OmegaConf.select(cfg, "hydra.run.dir"))
    with read_write(cfg.hydra.run), read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
        cfg.hydra.run.dir = run_dir  # the folder Hydra is then told to use, not ${now:...} again
        cfg.hydra.runtime.output_dir = os.path.abspath(run_dir)
    HydraConfig.instance().set_config(cfg)
    job = copy.deepcopy(cfg)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job


# hydra.help.template (conf/hydra/default.yaml and each command's YAML): Hydra's --help prints this text.
OmegaConf.register_new_resolver("command_help", command_help, replace=True)
import src.data.corpus  # noqa: E402, F401  (registers ${generated_text:NAME}, a text made with a fixed seed)


def check_choices(overrides: list[str]) -> None:
    """A group's option must be one of its YAML files: Hydra would also take a schema's name (model=gpt_schema)."""
    for o in OverridesParser.create().parse_overrides(overrides):
        group, value = o.key_or_group, o.value()
        if o.type == OverrideType.DEL or o.package is not None or group.startswith("hydra") or o.is_sweep_override():
            continue
        if isinstance(value, str) and (CONFIG_DIR / group).is_dir() and value not in options(group):
            raise ValueError(f"unknown option '{value}' for {group}: choose one of {', '.join(options(group))}")


def dotted_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """Every key of a config as typed on the command line: `model.num_heads`, `seed`, ..."""
    keys = []
    for key, value in node.items_ex(resolve=False):
        keys.append(f"{prefix}{key}")
        if isinstance(value, DictConfig):
            keys += dotted_keys(value, f"{prefix}{key}.")
    return keys


def unknown_key(key: str, config_name: str, overrides: list[str]) -> str:
    """Name the keys that do exist beside a misspelt one, from the same command line without it."""
    typed = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    key = next((k for k in typed if k == key or k.startswith(key + ".")), key)  # as typed: data.path, not data
    parent = key.rpartition(".")[0]
    rest = [o for o, k in zip(overrides, typed, strict=True) if k != key]
    try:
        root = compose(config_name, rest)
    except HydraException:
        return checks.unknown_key_message(key, "", [])
    node = OmegaConf.select(root, parent) if parent else root
    options = [str(k) for k in node] if isinstance(node, DictConfig) else []
    return checks.unknown_key_message(key, parent or "the config", options, dotted_keys(root))


def explain(err: HydraException, config_name: str, overrides: list[str]) -> str:
    """A Hydra composition error as one line that names the fix, read from the exception's fields."""
    if isinstance(err, OverrideParseException):
        return (
            f"cannot parse the override {err.override!r}: quote a value with spaces, commas or other special "
            f"characters, e.g. \"prompt='O Romeo, Romeo!'\""
        )
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and "/" in err.missing_cfg_file:
        group, option = err.missing_cfg_file.rsplit("/", 1)
        return f"unknown option '{option}' for {group}: choose one of {', '.join(options(group))}"
    cause = err.__cause__
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.full_key:
        return unknown_key(str(cause.full_key), config_name, overrides)
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        return f"{cause.full_key}: {str(cause.msg).splitlines()[0]}"  # without OmegaConf's detail lines
    return one_line(err)


def null_group(overrides: list[str]) -> str | None:
    """`logger=null`: Hydra says only "Config group override must be a string or a list"."""
    for override in overrides:
        group, _, value = override.partition("=")
        if value == "null" and (CONFIG_DIR / group).is_dir():
            removable = " or ~logger to train without TensorBoard" if group == "logger" else ""
            return f"{group}=null: a config group takes one of its options: {', '.join(options(group))}{removable}"
    return None


Check = Callable[[DictConfig, list[str]], Any]


def check_command_line(
    config_name: str, argv: list[str], check: Check | None, check_point: Check | None = None
) -> tuple[str, Any] | None:
    """Compose what argv asks for and check it, exiting with one line if refused. A single run: its run
    directory and what check(cfg, argv) returned there (the task's). A multirun: every point composed and
    given to check_point (train's: the sweeps wing's), each bad one named (a refusal all share, once)."""
    overrides = [a for a in argv if not a.startswith("-")]
    if not rundir.is_multirun(argv):
        try:
            check_choices(overrides)
            composed = compose(config_name, overrides, with_hydra=True)
        except HydraException as err:
            fail(explain(err, config_name, overrides))
        except ValueError as err:  # Hydra's own, e.g. a config group set to null
            fail(null_group(overrides) or one_line(err))
        if composed.hydra.mode != RunMode.MULTIRUN:  # an experiment's config may set it
            cfg = job_config(composed)
            return composed.hydra.run.dir, check(cfg, argv) if check is not None else None
    from src.run.points import check_sweeper_keys, sweep_points  # a multirun

    check_sweeper_keys(overrides)
    failed: list[tuple[int, list[str], Exception]] = []
    try:
        points = sweep_points(overrides)
    except HydraException as err:  # `model.num_heads=1,2,`: as a single run's typo is said
        fail(explain(err, config_name, overrides))
    with composer(config_name) as compose_point:  # each point as Hydra composes it
        for number, point in enumerate(points):
            try:
                check_choices(point)
                cfg = compose_point(point)
                if check_point is not None:
                    check_point(cfg, point)
            except (HydraException, *USER_ERRORS) as err:
                failed.append((number, point, err))
    # Explained once Hydra is free again: explain() may compose a neighbouring config.
    said = [explain(e, config_name, p) if isinstance(e, HydraException) else one_line(e) for _, p, e in failed]
    if len(points) > 1 and len(failed) == len(points) and len(set(said)) == 1:
        fail(said[0])  # every point refused alike: the command line's error, not a job's
    refused = [f"job {n} ({' '.join(point)}): {why}" for (n, point, _), why in zip(failed, said, strict=True)]
    if refused:
        print("\n".join(f"error: {line}" for line in refused), file=sys.stderr)
        sys.exit(2)
    return None


@contextmanager
def one_line_errors(full_errors: bool) -> Iterator[None]:
    """A user's error ends in one line (the full traceback with HYDRA_FULL_ERROR=1); a closed pipe quietly."""
    try:
        yield
    except BrokenPipeError:  # the reader closed the output (`generate ... | head -n 1`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except USER_ERRORS as err:
        if full_errors:
            raise
        fail(one_line(err))


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP to a command that installed no handler of its own (train installs its own): raised
    like Ctrl-C's KeyboardInterrupt, so that the command's cleanups run (export's partial folder is removed)
    and it ends in one line, not silently with status 143."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_stopped(signum: int, frame: object) -> None:
    raise Stopped(signum)


def command(
    config_name: str, task: Callable[[DictConfig], Any], check: Check | None = None, check_point: Check | None = None
) -> Any:
    """Run task(cfg) as a Hydra command reading conf/<config_name>.yaml, with one-line errors. The checks
    (check_command_line) run before hydra.main, which composes again in the run directory they met;
    what check returned is handed on as task(cfg, prepared). --help, --cfg and HYDRA_FULL_ERROR=1 skip them."""
    full_errors = os.environ.get("HYDRA_FULL_ERROR") == "1"
    for stream in (sys.stdout, sys.stderr):  # text the terminal cannot encode (CJK under LC_ALL=C) escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    prepared = None  # what check returned, for the task
    for stop in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(stop) is signal.SIG_DFL:
            signal.signal(stop, raise_stopped)

    def guarded(cfg: DictConfig) -> Any:
        with one_line_errors(full_errors):
            return task(cfg) if prepared is None else task(cfg, prepared)

    if any(a.lstrip("+").startswith("hydra.sweeper.params.") for a in sys.argv[1:]):  # Hydra reads sys.argv
        from src.run.points import search_space_as_overrides

        sys.argv[1:] = search_space_as_overrides(sys.argv[1:])
    argv = sys.argv[1:]
    outside = HydraConfig.instance().cfg  # job_config sets it for the run; given back after (tests run main())
    try:
        with one_line_errors(full_errors):
            if not full_errors and not any(a.startswith("-") and a not in ("-m", "--multirun") for a in argv):
                checked = check_command_line(config_name, argv, check, check_point)  # not --help, --cfg: nothing runs
                if checked is not None:  # a single run: Hydra is told the run directory the checks met
                    run_dir, prepared = checked
                    sys.argv[1:] = rundir.pinned_run_dir(argv, run_dir)
            register(config_name)
            return hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=config_name)(guarded)()
    except Stopped as stop:
        fail(f"stopped by {stop} before {config_name} finished", status=128 + stop.signum)
    except KeyboardInterrupt:  # before training started
        what = "training started: nothing was saved" if config_name == "train" else f"{config_name} finished"
        fail(f"interrupted before {what}", status=130)
    finally:
        HydraConfig.instance().cfg = outside
