# Two commands do all the set-up: `make grade` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch TORCH_VERSION is installed before the project so nothing pulls the multi-GB CUDA build: a torch
# wheel already on this machine (pip's find-links) if there is one, else torch from TORCH_INDEX and no other
# index; then its dependencies from pip's usual index. An index that does not answer ends it in one line.
# Without make: python -m grader.host.tools.setup.
# On a GPU machine: make TORCH_INDEX=https://download.pytorch.org/whl/cu124
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
ARGS ?=
PYTEST_ARGS ?=
# make test's pytest workers (pytest-xdist), which share one reference build; 0 runs the tests in one process.
TEST_WORKERS ?= 2

# The instructor's tools (the `instructor` extra). None of them writes exercises/; `make stubs` does:
# it regenerates exercises/ from solutions/, overwriting the stubs there.
RELEASE_DIR ?= ../gpt2-learner
GRADESCOPE_ZIP ?= autograder.zip
CLASSROOM50_DIR ?= classroom50-autograder
NOTEBOOKS_DIR ?= course/source/gpt2
COURSE_DIR ?= course
SUBMISSIONS ?= submissions
GRADES ?= grades.csv
RESULTS ?= grades-results
CLASS_REPORT ?= class-report
# The course's assignment (assignments.toml; `grade --assignments` lists them) that release's workflow, the Classroom
# 50 bundle, the Gradescope zip and batch grade: make classroom50 ASSIGNMENT=part1. Empty: every check.
ASSIGNMENT ?=
ASSIGNED := $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT),)
# The learner's copy has no solutions/: its tests need the learner-test extra, not the dev toolchain.
TEST_EXTRA ?= $(if $(wildcard solutions/__init__.py),dev,learner-test)

# The course repository lints itself (ruff, in the dev extra) before its tests; a learner's copy
# does not, as its grader and tests are not the learner's to change.
LINT_FIRST := $(if $(wildcard solutions/__init__.py),lint,)

.PHONY: grade play train experiment-positions test test-unit test-all lint stubs release classroom50 gradescope notebooks notebook-grades batch class-report clean

# grade exits 1 while a check does not pass and says so in words (and that make grade exits 0): no make error line.
grade: $(VENV)/.installed
	$(VENV)/bin/grade $(ARGS) || [ $$? -eq 1 ]

# The playground: your model and GPT-2 read the text you type, side by side, in a page on 127.0.0.1 (Ctrl-C stops it).
play: $(VENV)/.installed
	$(VENV)/bin/grade --play $(ARGS)

# Part 4: your training loop on the offline corpus; a loss plot, a checkpoint and a sample in train-output/.
train: $(VENV)/.installed
	$(VENV)/bin/python -m grader.builder.train $(ARGS)

# Part 6: positions concatenated or added, your models trained from 3 seeds each (about 8 minutes of CPU time, so
# 4 minutes or more on 2 cores); a table and a plot in experiment-output/.
experiment-positions: $(VENV)/.installed
	$(VENV)/bin/python -m grader.builder.positions_experiment $(ARGS)

# `make test`: the quick suite (a few minutes); `make test-all` adds the tests marked slow.
test: $(LINT_FIRST) $(VENV)/.installed-$(TEST_EXTRA)
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not slow and not stress" $(PYTEST_ARGS)

# `make test-unit`: the unit tier alone (tests/unit/; seconds, no torch, no learner's process).
test-unit: $(VENV)/.installed-$(TEST_EXTRA)
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

test-all: $(LINT_FIRST) $(VENV)/.installed-$(TEST_EXTRA)
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not stress" $(PYTEST_ARGS)

lint: $(VENV)/.installed-dev
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

release: $(VENV)/.installed-instructor
	$(PY) -m grader.host.tools.release $(RELEASE_DIR) $(ASSIGNED)

# Classroom 50's autograder bundle: commit the folder to the classroom50 repository as CLASSROOM/autograders/ASSIGNMENT/.
classroom50: $(VENV)/.installed-instructor
	$(PY) -m grader.host.platforms.classroom50.bundle $(CLASSROOM50_DIR) $(ASSIGNED)

# Gradescope's autograder zip: the learner repository with setup.sh and run_autograder.
gradescope: $(VENV)/.installed-instructor
	$(PY) -m grader.host.platforms.gradescope.bundle $(GRADESCOPE_ZIP) $(ASSIGNED)

notebooks: $(VENV)/.installed-instructor
	$(PY) -m grader.host.platforms.nbgrader.notebooks $(NOTEBOOKS_DIR)

# After `nbgrader autograde`: the notebooks' grades recorded from outside any kernel, into
# $(GRADES) and nbgrader's gradebook (in place of the scores autograde found in the kernel).
notebook-grades: $(VENV)/.installed-instructor
	$(PY) -m grader.host.platforms.nbgrader.notebooks grade $(COURSE_DIR)/submitted --csv $(GRADES) \
		--db sqlite:///$(abspath $(COURSE_DIR))/gradebook.db $(ARGS)

batch: $(VENV)/.installed-instructor
	$(PY) -m grader.host.tools.batch $(SUBMISSIONS) --csv $(GRADES) $(ASSIGNED) $(ARGS)

# The class view: which checks most learners fail, and on which named mistakes (from batch's results by default).
class-report: $(VENV)/.installed-instructor
	$(PY) -m grader.host.tools.class_report $(RESULTS) --csv $(CLASS_REPORT).csv --html $(CLASS_REPORT).html \
		--markdown $(CLASS_REPORT).md --lms $(CLASS_REPORT)-lms.csv $(ARGS)

stubs: $(VENV)/.installed-dev
	$(PY) -m grader.host.tools.stubs

$(PY):
	$(PYTHON) -m venv $(VENV)

# grader.host.tools.setup holds the torch logic, for make and for `python -m grader.host.tools.setup` (no make) alike.
$(VENV)/.torch: | $(PY)
	$(PY) -m grader.host.tools.setup --torch-only --torch-version "$(TORCH_VERSION)" --torch-index "$(TORCH_INDEX)"
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -e ".[play]"
	touch $@

# .installed-dev, -instructor, -learner-test: the project with that extra (dev includes the others), and the
# playground's server (the play extra) as .installed has it.
$(VENV)/.installed-%: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -e ".[play,$*]"
	touch $@ $(VENV)/.installed

clean:
	rm -rf $(VENV)
