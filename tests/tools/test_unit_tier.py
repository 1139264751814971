"""The unit tier (`make test-unit`, `pytest -m unit`) imports no torch: collected in a fresh pytest, it imports only
the files of tests/unit/ and what they import, and the session fails if torch is among them (reference_session)."""

from __future__ import annotations

import os
import subprocess
import sys

from repo import REPO


def collect_the_unit_tier(*options: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "unit", "--collect-only", "-q", "-p", "no:cacheprovider", *options],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_the_unit_tier_is_its_files_and_imports_no_torch():
    collected = collect_the_unit_tier()
    assert collected.returncode == 0, collected.stdout + collected.stderr
    tests = [line for line in collected.stdout.splitlines() if "::" in line]
    assert len(tests) > 100
    assert {test.split("::")[0] for test in tests} >= {
        "tests/unit/test_refcache_unit.py",
        "tests/unit/test_dependencies_unit.py",
        "tests/unit/test_watch_unit.py",
        "tests/unit/test_compare_unit.py",
    }
    assert all(test.startswith("tests/unit/") for test in tests)
    assert "imported torch" not in collected.stdout


def test_a_unit_tier_that_imports_torch_fails(tmp_path):
    """The control: a plugin module named torch (an empty file here) loaded into the tier's session."""
    (tmp_path / "torch.py").write_text("")
    collected = collect_the_unit_tier("-p", "torch", env={"PYTHONPATH": str(tmp_path)})
    assert collected.returncode == 1
    assert "the unit tier imported torch" in collected.stdout
