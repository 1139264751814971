"""nbgrader: the exercises as notebooks for Jupyter and Colab, one per part, and their grades. No `grade` option and
no read-back of its own: `notebooks` is its command (`python -m grader.host.platforms.nbgrader.notebooks`, `make
notebooks`) and the kernel's side (`%load_ext grader.host.platforms.nbgrader.notebooks`: `%%exercise`,
`grade_check`); `sources` writes the source notebooks and nbgrader_config.py; `grades` records the submitted
notebooks' grades outside any kernel (`notebooks grade`, `make notebook-grades`) into batch's gradebook CSV, with its
`flag` column, and batch's per-learner JSON, which the class view reads as batch's."""

from grader.host.platforms import Platform

PLATFORM = Platform()
