"""`python -m grader.host.tools.setup`, the set-up without make: the pip commands it would run (--dry-run),
in the order the Makefile's set-up has always used, and the Makefile calling it."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import venv
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
        f"else: {py} --no-deps --index-url {CPU} --timeout 15 --retries 2 torch=={VERSION}",
        f"{py} torch=={VERSION}",
        f"{py} -e .[play]",
    ]


def test_the_fallback_pins_the_version_and_takes_torch_from_the_index_alone():
    """torch itself from the CPU index and no other (PyPI's torch is the CUDA build): pinned, without dependencies,
    no --extra-index-url; then the same pin, satisfied, for its dependencies from pip's own index."""
    lines = dry_run()
    fallback = lines[lines.index(next(line for line in lines if line.startswith("else: "))) :]
    assert f"--no-deps --index-url {CPU} " in fallback[0] and fallback[0].endswith(f" torch=={VERSION}")
    assert fallback[1].endswith(f"-m pip install torch=={VERSION}")
    assert not any("--extra-index-url" in line or "--find-links" in line for line in lines)
    assert all(f"torch=={VERSION}" in line for line in lines if "torch" in line), lines


def test_the_index_is_overridable_for_cuda_by_option_or_environment():
    cuda = "https://download.pytorch.org/whl/cu124"
    for lines in (dry_run("--torch-index", cuda), dry_run(env={"TORCH_INDEX": cuda})):
        assert [line for line in lines if "--index-url" in line] == [
            f"else: {sys.executable} -m pip install --no-deps --index-url {cuda} --timeout 15 --retries 2 "
            f"torch=={VERSION}"
        ]


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens: a connection is refused."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


def test_pip_looks_for_torch_in_the_named_index_alone(tmp_path):
    """The fallback's torch command with the environment setup gives it, where pip's configuration names another
    index and find-links: pip looks in the named index only. Run as `pip download`, so nothing is installed."""
    from grader.host.tools import setup

    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nextra-index-url = {tmp_path.as_uri()}/other\nfind-links = {tmp_path / 'links'}\n")
    environ = os.environ | {"PIP_CONFIG_FILE": str(config), "PIP_EXTRA_INDEX_URL": "a", "PIP_FIND_LINKS": "b"}
    index, ran = f"http://127.0.0.1:{closed_port()}/whl/cpu", []
    with (
        mock.patch.dict(os.environ, environ, clear=True),
        mock.patch.object(setup, "torch_imports", lambda python: False),
        mock.patch.object(setup, "unanswered", lambda index: None),
        mock.patch.object(
            setup, "runs", lambda command, quiet=False, env=None: ran.append((command, env)) or not quiet
        ),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        assert setup.install_torch(sys.executable, VERSION, index) is None
    [(torch_alone, torch_environ)] = [(command, env) for command, env in ran if "--index-url" in command]
    download = [*torch_alone[:3], "download", "--dest", str(tmp_path / "got"), *torch_alone[4:]]
    pip = subprocess.run(download, capture_output=True, text=True, env=torch_environ, timeout=120)
    assert pip.returncode != 0 and not list(tmp_path.glob("got/*")), pip.stdout
    assert f"Looking in indexes: {index}\n" in pip.stdout and "Looking in links" not in pip.stdout, pip.stdout


def set_up_with_the_index(index: str, tmp_path) -> subprocess.CompletedProcess:
    """`setup --venv --torch-only` where the CPU index is `index`, into a venv without pip (it can install nothing),
    every other index closed too; within a minute, or the subprocess's timeout fails the test."""
    venv.create(tmp_path / "env", with_pip=False)
    closed = f"http://127.0.0.1:{closed_port()}/simple"
    environ = {key: value for key, value in os.environ.items() if key not in ("TORCH_INDEX", "TORCH_VERSION")}
    environ |= {"PIP_INDEX_URL": closed, "PIP_EXTRA_INDEX_URL": " ", "PIP_FIND_LINKS": " "}
    command = [sys.executable, "-m", "grader.host.tools.setup", "--venv", str(tmp_path / "env"), "--torch-only"]
    return subprocess.run(
        [*command, "--torch-index", index], capture_output=True, text=True, cwd=REPO, env=environ, timeout=60
    )


def assert_one_line_said_what_to_do(set_up: subprocess.CompletedProcess, index: str, reason: str) -> None:
    assert set_up.returncode == 1 and set_up.stdout.splitlines() == [
        f"setup: installing torch {VERSION} from a wheel on this machine, if there is one",
        f"setup: no torch {VERSION} wheel on this machine; installing it from {index}",
    ], set_up.stdout + set_up.stderr
    [line] = set_up.stderr.splitlines()
    assert re.fullmatch(
        rf"setup: {re.escape(index)} does not answer \({reason}\): retry later, pass --torch-index URL \(a mirror\), "
        rf"or install torch=={re.escape(VERSION)} yourself and rerun",
        line,
    ), line


def test_a_cpu_index_that_refuses_ends_the_set_up_in_one_line(tmp_path):
    index = f"http://127.0.0.1:{closed_port()}/whl/cpu"
    assert_one_line_said_what_to_do(set_up_with_the_index(index, tmp_path), index, r".+")
    assert not list((tmp_path / "env").rglob("torch*"))


@pytest.mark.slow  # the probe waits its 10 s
def test_a_cpu_index_that_never_answers_ends_the_set_up_in_one_line(tmp_path):
    from grader.host.tools import setup

    with socket.socket() as silent:  # connections are accepted (the backlog) and never answered
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        index = f"http://127.0.0.1:{silent.getsockname()[1]}/whl/cpu"
        set_up = set_up_with_the_index(index, tmp_path)
    assert_one_line_said_what_to_do(set_up, index, f"nothing within {setup.PROBE_SECONDS} s")
    assert not list((tmp_path / "env").rglob("torch*"))


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

    from grader.host.platforms.nbgrader import sources

    source = "git+https://example.org/course/gpt2-learner"
    code = TransformerManager().transform_cell(sources.SETUP.format(source=source))
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
        assert magics[-1] == ("load_ext", "grader.host.platforms.nbgrader.notebooks")


def test_the_autograders_set_up_installs_torchs_dependencies_with_the_grader_uncompiled():
    """--grading (Classroom 50's autograder): torch alone as ever, then one pip run for torch's dependencies and the
    grader's, none byte-compiled; --torch-only is make's torch step whatever else is asked."""
    py = f"{sys.executable} -m pip install"
    assert dry_run("--grading") == [
        f"{py} --no-index --no-deps torch=={VERSION}",
        f"else: {py} --no-deps --index-url {CPU} --timeout 15 --retries 2 torch=={VERSION}",
        f"{py} --no-compile torch=={VERSION} -e .",
    ]
    assert dry_run("--grading", "--torch-only") == dry_run("--torch-only")
