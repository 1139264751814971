"""Large imports with the cyclic garbage collector paused (grader.shared.imports): no collection runs inside, what is
alive on leaving is frozen, and the collector is left as it was found."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from grader.shared.imports import collection_paused

pytestmark = pytest.mark.unit


@pytest.fixture
def collections():
    """The generations of the collections that run while the test does; the freeze undone after."""
    seen: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        gc.unfreeze()
        gc.enable()


def cycles(count: int) -> list[dict]:
    """Enough container objects to set off collections several times over (gen0's threshold is 700)."""
    made = []
    for _ in range(count):
        node: dict = {}
        node["self"] = node
        made.append(node)
    return made


# In a fresh interpreter: in pytest's, a thread left by another test may allocate, or collect, while this one runs.
FRESH_PROCESS_SCENARIO = """
import gc
from grader.shared.imports import collection_paused
seen = []
gc.callbacks.append(lambda phase, info: seen.append(info["generation"]) if phase == "start" else None)
def cycles(count):
    made = []
    for _ in range(count):
        node = {}
        node["self"] = node
        made.append(node)
    return made
frozen_before = gc.get_freeze_count()
with collection_paused():
    disabled_inside = not gc.isenabled()
    kept = cycles(20 * gc.get_threshold()[0])
inside = list(seen)
print(disabled_inside, inside, gc.isenabled(), gc.get_freeze_count() >= frozen_before + len(kept))
cycles(20 * gc.get_threshold()[0])
print(bool(seen[len(inside):]))
"""


def test_no_collection_runs_inside_and_what_it_made_is_frozen():
    ran = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCENARIO], capture_output=True, text=True, check=True, timeout=60
    )
    inside, after = ran.stdout.splitlines()
    assert inside == "True [] True True", "disabled inside, no collection, enabled after, what it made frozen"
    assert after == "True", "outside, the collector runs again"


def test_a_paused_collector_stays_paused(collections):
    gc.disable()
    with collection_paused():
        cycles(5 * gc.get_threshold()[0])
    assert not gc.isenabled()
    assert collections == []


def test_the_collector_is_restored_when_the_import_fails(collections):
    with pytest.raises(ModuleNotFoundError), collection_paused():
        import no_such_module_anywhere  # noqa: F401
    assert gc.isenabled()
