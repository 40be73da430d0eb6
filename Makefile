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

.PHONY: train test lint corpus clean-outputs

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

# The code downloads Tiny Shakespeare on first use; where a shared copy sits beside the
# project (this workplace, CI), it seeds the cache instead.
corpus:
	@if [ ! -f $(CORPUS) ] && [ -f $(SHARED_CORPUS) ]; then \
		mkdir -p $(dir $(CORPUS)) && cp $(SHARED_CORPUS) $(CORPUS) && echo "seeded $(CORPUS) from $(SHARED_CORPUS)"; \
	fi

train: $(BIN)/.installed corpus
	$(BIN)/python -m src.train $(ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: $(BIN)/.installed corpus lint
	$(BIN)/python -m pytest $(ARGS)

clean-outputs:
	rm -rf outputs/20* outputs/multirun
