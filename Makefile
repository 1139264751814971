# Two commands do all the set-up: `make grade` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed before the project so nothing pulls the multi-GB CUDA build:
# a torch wheel already on this machine (pip's find-links) if there is one, its dependencies
# from the usual index; else PyTorch's CPU-only index. Without make: python -m grader.setup.
# On a GPU machine: make TORCH_INDEX=https://download.pytorch.org/whl/cu124
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
ARGS ?=
PYTEST_ARGS ?=

.PHONY: grade test stubs clean

grade: $(VENV)/.installed
	$(VENV)/bin/grade $(ARGS)

test: $(VENV)/.installed-dev
	$(PY) -m pytest $(PYTEST_ARGS)

stubs: $(VENV)/.installed-dev
	$(PY) -m grader.stubs

$(PY):
	$(PYTHON) -m venv $(VENV)

# grader.setup holds the torch logic, for make and for `python -m grader.setup` (no make) alike.
$(VENV)/.torch: | $(PY)
	$(PY) -m grader.setup --torch-only --torch-version "$(TORCH_VERSION)" --torch-index "$(TORCH_INDEX)"
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -e ".[dev]"
	touch $@ $(VENV)/.installed

clean:
	rm -rf $(VENV)
