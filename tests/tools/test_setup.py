"""`python -m grader.host.tools.setup`, the set-up without make: the pip commands it would run (--dry-run),
in the order the Makefile's set-up has always used, and the Makefile calling it."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from unittest import mock

import pytest
from repo import REPO

pytestmark = pytest.mark.portable
CPU = "https://download.pytorch.org/whl/cpu"
VERSION = re.search(r"^TORCH_VERSION \?= (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE).group(1)


def dry_run(*args: str, env: dict | None = None, command_line: bool = False) -> list[str]:
    """The commands `--dry-run` prints. In this process unless `command_line`: the probe for an importable torch
    (a child importing torch, seconds) is left out, as its line, a comment, is no command; command_line runs
    `python -m grader.host.tools.setup` itself, probe and all."""
    environ = {key: value for key, value in os.environ.items() if key not in ("TORCH_INDEX", "TORCH_VERSION")}
    environ |= env or {}
    if command_line:
        command = [sys.executable, "-m", "grader.host.tools.setup", "--dry-run", *args]
        finished = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=environ, timeout=120)
        assert finished.returncode == 0, finished.stderr
        printed = finished.stdout
    else:
        from grader.host.tools import setup

        out = io.StringIO()
        with (
            mock.patch.dict(os.environ, environ, clear=True),
            mock.patch.object(setup, "torch_imports", lambda python: False),
            contextlib.redirect_stdout(out),
        ):
            assert setup.main(["--dry-run", *args]) == 0
        printed = out.getvalue()
    return [line for line in printed.splitlines() if not line.startswith("#")]


def test_torch_first_a_local_wheel_else_the_cpu_index_then_the_project():
    py = f"{sys.executable} -m pip install"
    assert dry_run(command_line=True) == [
        f"{py} --no-index --no-deps torch=={VERSION}",
        f"{py} torch=={VERSION}",
        f"else: {py} torch --index-url {CPU} --extra-index-url https://pypi.org/simple",
        f"{py} -e .",
    ]


def test_the_index_is_overridable_for_cuda_by_option_or_environment():
    cuda = "https://download.pytorch.org/whl/cu124"
    for lines in (dry_run("--torch-index", cuda), dry_run(env={"TORCH_INDEX": cuda})):
        assert [line for line in lines if "--index-url" in line] == [
            f"else: {sys.executable} -m pip install torch --index-url {cuda} --extra-index-url https://pypi.org/simple"
        ]


def test_a_venv_is_made_and_installed_into(tmp_path):
    venv = tmp_path / "env"
    lines = dry_run("--venv", str(venv), "--dev")
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    assert lines[0].split() == [sys.executable, "-m", "venv", str(venv)]
    assert all(line.removeprefix("else: ").startswith(f"{python} -m pip install") for line in lines[1:]), lines
    assert lines[-1].endswith("-m pip install -e .[dev]") and not venv.exists()  # a dry run makes nothing


def test_torch_only_stops_before_the_project():
    assert not any("-e ." in line for line in dry_run("--torch-only"))


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_the_makefile_installs_torch_through_grader_setup(tmp_path):
    """`make -n` on a fresh venv: the torch step is grader.host.tools.setup's, with the Makefile's version and index."""
    venv = tmp_path / "venv"
    planned = subprocess.run(
        ["make", "-n", f"VENV={venv}", f"{venv}/.installed"], capture_output=True, text=True, cwd=REPO
    ).stdout
    torch_steps = [line for line in planned.splitlines() if "torch" in line and not line.startswith("touch ")]
    assert torch_steps == [
        f'{venv}/bin/python -m grader.host.tools.setup --torch-only --torch-version "{VERSION}" --torch-index "{CPU}"'
    ]


def test_the_makefile_and_grader_setup_pin_the_same_torch():
    from grader.host.tools import setup

    assert setup.TORCH_VERSION == VERSION and setup.CPU_INDEX == CPU
    assert f"TORCH_INDEX ?= {CPU}" in (REPO / "Makefile").read_text()


def test_the_notebooks_first_cell_installs_the_grader_only_where_it_is_missing():
    """The cell as IPython runs it: %pip only when `grader` cannot be imported, as in a fresh Colab runtime."""
    from IPython.core.inputtransformer2 import TransformerManager

    from grader.host.tools import notebook_sources

    source = "git+https://example.org/course/gpt2-learner"
    code = TransformerManager().transform_cell(notebook_sources.SETUP.format(source=source))
    for missing in (True, False):
        magics = []
        shell = type(
            "Shell", (), {"run_line_magic": lambda self, name, line, magics=magics: magics.append((name, line))}
        )()
        spec = type(
            "Util", (), {"find_spec": staticmethod(lambda name, missing=missing: None if missing else object())}
        )
        exec(
            code.replace("import importlib.util\n", ""),
            {"get_ipython": lambda shell=shell: shell, "importlib": type("M", (), {"util": spec})},
        )
        installs = [line for name, line in magics if name == "pip"]
        assert installs == ([f'install --quiet "gpt2-from-scratch-grader @ {source}"'] if missing else [])
        assert magics[-1] == ("load_ext", "grader.host.tools.notebooks")
