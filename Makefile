# Two commands do all the set-up on a fresh machine:
#   make train   train with the defaults, then print a sample
#   make test    run the test suite (lint included)
# Both create .venv and install what they need on first use. Extra arguments: ARGS="model.num_heads=5".

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch this project is developed on. On a CUDA machine: make TORCH="torch" train
TORCH ?= torch==2.13.0
CORPUS := data/tinyshakespeare/input.txt
SHARED_CORPUS := ../shared/data/tinyshakespeare/input.txt

.PHONY: train tensorboard test test-fast gpu-check gpu-wheels lint lock corpus postgres-up postgres-down slurm-up slurm-down clean-outputs exercise check-exercise train-exercise exercise-reset

# torch through pip (the CPU build lies in pip's find-links here), everything else through uv at
# the versions of constraints.txt: the versions the tests passed with, installed in parallel.
# --compile-bytecode: uv writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set (as
# on this workplace's machines) Python never caches them either, so every process would compile
# Lightning's sources again (`import lightning` in a fresh clone: BENCHMARKS.md, "Start-up").
$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)" uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode --constraint constraints.txt -e ".[dev]"
	touch $@

# After changing the dependencies in pyproject.toml: pin what is installed now (torch excepted,
# which TORCH chooses per machine).
lock: $(BIN)/.installed
	$(BIN)/uv pip freeze --python $(BIN)/python --exclude-editable | grep -v '^torch==' > constraints.txt

# The code downloads Tiny Shakespeare on first use; where a shared copy sits beside the
# project (this workplace, CI), it seeds the cache instead.
corpus:
	@if [ ! -f $(CORPUS) ] && [ -f $(SHARED_CORPUS) ]; then \
		mkdir -p $(dir $(CORPUS)) && cp $(SHARED_CORPUS) $(CORPUS) && echo "seeded $(CORPUS) from $(SHARED_CORPUS)"; \
	fi

# The explorer's tests open its page in Debian's Chromium, driven by Playwright's Python package, and in
# Debian's Firefox ESR (tests/explorer/test_firefox.py)
# (pyproject's dev extra); Playwright's own browser download is never used.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null || { echo "installing Debian's chromium for the browser tests"; \
		$(SUDO) apt-get install -y chromium >/dev/null || \
		{ $(SUDO) apt-get update >/dev/null && $(SUDO) apt-get install -y chromium >/dev/null; }; }
	@command -v firefox-esr >/dev/null || { echo "installing Debian's firefox-esr for tests/explorer/test_firefox.py"; \
		$(SUDO) apt-get install -y firefox-esr >/dev/null || \
		{ $(SUDO) apt-get update >/dev/null && $(SUDO) apt-get install -y firefox-esr >/dev/null; }; }

# A local PostgreSQL for an Optuna search's study (scripts/postgres.sh; docs/scaling.md): prints its URL.
# The tests of shared searches start their own (tests/sweeps/conftest.py).
postgres-up:
	@scripts/postgres.sh up
postgres-down:
	@scripts/postgres.sh down

train: $(BIN)/.installed corpus
	$(BIN)/python -m src.train $(ARGS)

# Every run under outputs/ (LOGDIR=outputs/multirun/<date>/<time> for one sweep); prints the address to open
LOGDIR ?= outputs
tensorboard: $(BIN)/.installed
	@$(BIN)/python -m src.watch $(LOGDIR)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: $(BIN)/.installed corpus browser lint
	$(BIN)/python -m pytest $(ARGS)

# The edit loop: everything but the slow end-to-end tests (docs/development.md, "Tests").
test-fast: $(BIN)/.installed corpus browser
	$(BIN)/python -m pytest -m "not slow" $(ARGS)

# Everything that needs a CUDA GPU, in one go, into one report (benchmarks/gpu_check.py; docs/scaling.md).
# NANOGPT=/path/to/nanoGPT runs its train.py beside experiment=nanogpt_gpu.
gpu-check: $(BIN)/.installed corpus
	@$(BIN)/python -m benchmarks.gpu_check $(if $(NANOGPT),--nanogpt $(NANOGPT))

# A GPU machine without internet whose python3 already has a CUDA build of torch and Lightning (a
# cluster's node): here, `make gpu-wheels` puts the rest of what the check needs into .whl/ as wheels;
# there, `python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*`, then
# `PYTHONPATH=/tmp/site python3 -m benchmarks.gpu_check`.
GPU_WHEELS := hydra-core omegaconf antlr4-python3-runtime hydra-joblib-launcher hydra-submitit-launcher submitit
gpu-wheels: $(BIN)/.installed
	$(BIN)/python -m pip wheel --quiet --no-deps --constraint constraints.txt -w .whl $(GPU_WHEELS)

# The exercises (docs/learn.md): write a piece of the notes yourself, graded by the project's tests.
#   make exercise NAME=attention         your copy in exercises/attention.py, its body removed
#   make check-exercise NAME=attention   the project's tests for it, against your copy
#   make train-exercise NAME=attention   train the notes' model with it, and with the reference
#   make exercise-reset NAME=attention   start again (your version is kept as attention.py.old)
exercise: $(BIN)/.installed
	@$(BIN)/python -m src.exercises start $(NAME)

check-exercise: $(BIN)/.installed corpus
	@$(BIN)/python -m src.exercises check $(NAME)

train-exercise: $(BIN)/.installed corpus
	@$(BIN)/python -m src.exercises train $(NAME) $(ARGS)

exercise-reset: $(BIN)/.installed
	@$(BIN)/python -m src.exercises reset $(NAME)

clean-outputs:
	rm -rf outputs/20* outputs/multirun

# A one-node SLURM cluster on this machine (Debian's slurm-wlm and munge, run as root; scripts/slurm.sh):
# what tests/cluster/ runs against, and where hydra/launcher=slurm can be tried. `up` prints the
# `export SLURM_CONF=...` line every srun/sbatch/sinfo of your shell needs.
slurm-up:
	@scripts/slurm.sh up

slurm-down:
	@scripts/slurm.sh down
