"""Adding a check touches the files docs/adding-a-check.md names, and no other: a check file placed by its own PAGE,
every registered check has a written-wrong variant in the tests (or a reason it has none), and the page holds to
the tree (its paths, its commands, its check file template)."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import types

import pytest
import test_induction
import test_interp
import test_messages_match_the_table
import test_mistakes
import test_positions
import test_sampling
import test_skip_trigrams
import test_training
from repo import REPO

import grader.checks
from grader.checks import PARTS, Check, MisplacedCheck, check_in, check_modules, registry
from grader.host.course import COURSE_DIR, page_of

TESTS = REPO / "tests"
DOC = REPO / "docs" / "adding-a-check.md"

# The tables of written-wrong variants, each graded and failing at the check it names: file -> those checks.
VARIANT_TABLES = {
    "tests/course/test_mistakes.py": {row[0] for row in test_mistakes.MISTAKES.values()},
    "tests/course/test_sampling.py": {row[0] for row in test_sampling.MISTAKES.values()},
    "tests/course/test_interp.py": set(test_interp.MISTAKES),  # keyed by check
    "tests/course/test_training.py": {row[0] for row in test_training.MISTAKES.values()},
    "tests/course/test_induction.py": {row[0] for row in test_induction.MISTAKES.values()},
    "tests/course/test_positions.py": {row[0] for row in test_positions.MISTAKES.values()},
    "tests/course/test_skip_trigrams.py": {row[0] for row in test_skip_trigrams.MISTAKES.values()},
    "tests/pipeline/test_messages_match_the_table.py": set(test_messages_match_the_table.RETURNS),  # keyed by check
}
# Checks whose written-wrong variant is graded in a test of its own: check -> "file::test".
VARIANTS_ELSEWHERE = {
    "sampling.greedy": "tests/course/test_part2_diagnosis.py::test_sampling_generate_names_the_failing_greedy_search",
}
# Checks with no written-wrong variant of their own: check -> why.
EXEMPT = {
    "beam.search": "the learner does not write beam_search, it is given: it fails only through the Beams methods it "
    "calls, and test_part2_diagnosis.py grades their variants at beam.search too",
}


def in_tables() -> set[str]:
    return set().union(*VARIANT_TABLES.values())


# --- the registry finds every check file -----------------------------------------------------------


def test_every_check_module_names_its_page_and_a_part_of_the_course():
    for module_name in check_modules():
        module = importlib.import_module(f"grader.checks.{module_name}")
        assert (REPO / COURSE_DIR / module.PAGE).is_file(), module_name
        assert check_in(module).part in PARTS, module_name


def test_each_part_has_one_file_per_check_named_for_it_and_none_is_long():
    """A check is one file: in its part's package, named for the last word of its id (`beam.generate` is
    `sampling/beam_generate.py`, beside `sampling/sampling_generate.py`), under 250 lines like every helper there."""
    for module in check_modules():
        check = check_in(importlib.import_module(f"grader.checks.{module}"))
        package, name = module.split(".")
        assert package == check.part and name.endswith(check.id.rsplit(".", 1)[-1]), (module, check.id)
    long = {
        path.name: n
        for path in (REPO / "grader/checks").rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 250
    }
    assert long == {}


def test_the_course_follows_the_pages_and_what_each_check_uses():
    checks = registry()
    pages = [check.page for check in checks]
    assert pages == sorted(pages)
    assert list(dict.fromkeys(check.part for check in checks)) == list(PARTS)  # every part, in the course's order
    assert all((REPO / COURSE_DIR / first).is_file() for first in PARTS.values())
    for position, check in enumerate(checks):
        later_on_its_page = {c.id for c in checks[position:] if c.page == check.page}
        assert not set(check.uses) & later_on_its_page, f"{check.id} comes before a check it uses"


def placed_beside_the_course(monkeypatch, source: str, name: str) -> list[str]:
    """The course's check ids with the template's check file added as grader.checks.model.<name>, and nothing else."""
    module = types.ModuleType(f"grader.checks.model.{name}")
    exec(compile(source, str(DOC), "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(grader.checks, "check_modules", lambda: sorted([*check_modules(), f"model.{name}"]))
    return [check.id for check in registry()]


def test_a_new_check_file_is_placed_by_its_page_alone(monkeypatch):
    ids = placed_beside_the_course(monkeypatch, code_block("python"), "rmsnorm")
    assert ids[ids.index("layernorm") + 1] == "rmsnorm" and page_of("rmsnorm") == f"{COURSE_DIR}/04-layernorm.md"


def test_on_its_page_a_new_check_comes_after_the_checks_it_uses(monkeypatch):
    source = code_block("python").replace('"04-layernorm.md"', '"05-attention.md"')
    source = source.replace("rmsnorm_cases)", 'rmsnorm_cases, uses=("attention",))')
    ids = placed_beside_the_course(monkeypatch, source, "aaa_rotary")  # first of the page's modules by name
    assert ids.index("attention.causal_mask") < ids.index("attention") < ids.index("rmsnorm")


def test_the_registry_refuses_a_check_file_without_a_page(monkeypatch):
    source = re.sub(r"^PAGE = .*$", "", code_block("python"), flags=re.MULTILINE)
    with pytest.raises(MisplacedCheck, match="rmsnorm.*declare PAGE"):
        placed_beside_the_course(monkeypatch, source, "rmsnorm")


# --- every check has a written-wrong variant --------------------------------------------------------


def test_every_check_has_a_written_wrong_variant_or_a_reason():
    covered = in_tables() | set(VARIANTS_ELSEWHERE) | set(EXEMPT)
    missing = [check.id for check in registry() if check.id not in covered]
    assert missing == [], f"no written-wrong variant for {missing}: see docs/adding-a-check.md, step 5"


def test_the_variants_and_exemptions_name_registered_checks_once():
    registered = {check.id for check in registry()}
    assert in_tables() | set(VARIANTS_ELSEWHERE) | set(EXEMPT) <= registered
    assert not (in_tables() & set(VARIANTS_ELSEWHERE)) and not ((in_tables() | set(VARIANTS_ELSEWHERE)) & set(EXEMPT))


@pytest.mark.parametrize("check_id", VARIANTS_ELSEWHERE)
def test_a_variant_elsewhere_is_a_test_that_writes_one_and_grades_its_check(check_id):
    file, name = VARIANTS_ELSEWHERE[check_id].split("::")
    source = (REPO / file).read_text()
    [test] = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef) and node.name == name]
    assert f'"{check_id}"' in ast.get_source_segment(source, test)
    assert "write_variant(" in source  # in the test, or in the fixture that grades its packages


# --- docs/adding-a-check.md holds to the tree ------------------------------------------------------


def test_every_path_the_page_names_exists():
    paths = set(re.findall(r"\b(?:solutions|exercises|grader|tests|docs)/[\w./-]*\w/?", DOC.read_text()))
    assert paths and [path for path in sorted(paths) if not (REPO / path).exists()] == []


def test_the_pages_commands_exist():
    commands = code_block("bash").splitlines()
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))
    for command in commands:
        if command.startswith("make "):
            assert command.split()[1] in targets, command
        for module in re.findall(r"-m ([\w.]+)", command):
            assert importlib.util.find_spec(module), command


def test_the_steps_name_each_file_the_tests_require_in_order():
    """Solution, stub, check file with its PAGE, its driver where it needs one, the variant, with each table the
    tests read, the page's generated block (which tests/course/test_course_pages.py reads), then the README's table."""
    text = DOC.read_text()
    course = "python -m grader.host.course"
    steps = ["solutions/", "make stubs", "grader/checks/model/", "`PAGE`", "grader/learner/drivers/", *VARIANT_TABLES]
    steps += [course, "README.md"]
    positions = [text.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), dict(zip(steps, positions, strict=True))
    assert "VARIANTS_ELSEWHERE" in text and "EXEMPT" in text


def readme_table_checks() -> list[str]:
    """The check ids in the last column of the README's tables of exercises (rows `| <n> | file | ... | checks |`)."""
    rows = [line for line in (REPO / "README.md").read_text().splitlines() if re.match(r"\| \d+ \|", line)]
    return [check for row in rows for check in re.findall(r"`([a-z_.]+)`", row.rstrip("|").split("|")[-1])]


def test_the_readmes_tables_name_every_check_once():
    """Step 6: a new check is a row of its part's table in the README, where learners find what to write."""
    named = readme_table_checks()
    assert sorted(named) == sorted(check.id for check in registry())


def test_the_check_file_template_is_what_the_registry_reads():
    source = code_block("python")
    module = types.ModuleType("grader.checks.model.rmsnorm")
    exec(compile(source, str(DOC), "exec"), module.__dict__)
    check = check_in(module)
    assert isinstance(check, Check) and check.part in PARTS and module.PAGE
    assert f"model.{check.id}" not in check_modules()  # an example, not a check of the course
    top_level = [node for node in ast.parse(source).body if isinstance(node, ast.Import | ast.ImportFrom)]
    imported = [alias.name for node in top_level for alias in node.names] + [
        node.module for node in top_level if isinstance(node, ast.ImportFrom)
    ]
    assert not any(name and name.split(".")[0] == "torch" for name in imported), "torch only inside case builders"


def code_block(language: str) -> str:
    """The page's one code block in `language`."""
    [block] = re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)
    return block
