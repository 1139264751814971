"""The course's assignments (assignments.toml): the default file, what `grade --assignments` lists, what an assignment
selects and scores, and a file that is wrong refused in one line naming the file and the assignment."""

from __future__ import annotations

import pytest

from grader.checks import PARTS, UnknownCheck, registry
from grader.host import assignments, cli
from grader.host.assignments import AssignmentError, chosen, find, load
from grader.host.main import wants_grading

pytestmark = pytest.mark.unit

PART1 = [check.id for check in registry() if check.part == "model"]


def test_the_default_file_has_an_assignment_per_part_and_one_for_the_whole_course():
    assignments = load()
    assert len(assignments) >= 7
    by_checks = {tuple(check.id for check in a.checks): a.name for a in assignments}
    for part in PARTS:
        assert tuple(check.id for check in registry() if check.part == part) in by_checks, part
    assert tuple(check.id for check in registry()) in by_checks
    # Points as the check modules give them: the default file overrides none.
    assert all(check in registry() for a in assignments for check in a.checks)


def test_grade_assignments_lists_each_by_name_first_with_its_checks_and_points(capsys):
    assert cli.main(["--assignments"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [a.name for a in load()]
    part1 = next(line for line in lines if line.startswith("part1 "))
    assert part1.split()[1:3] == ["17", "pt;"]
    assert part1.endswith(", ".join(f"{check.id} ({check.points})" for check in registry() if check.part == "model"))
    assert not wants_grading(["--assignments"])  # no learner's process started for a listing


def test_an_assignment_grades_its_checks_in_course_order_and_check_names_narrow_it():
    assert [check.id for check in chosen([], "part1")] == PART1
    assert [check.id for check in chosen(["layernorm", "embed"], "part1")] == ["embed", "layernorm"]
    with pytest.raises(UnknownCheck, match="assignment 'part1': no check matches 'sampling'"):
        chosen(["sampling"], "part1")
    with pytest.raises(AssignmentError, match=r"no assignment 'week9' \(it holds: part1, "):
        find("week9")
    assert chosen(["embed"], None) == [next(check for check in registry() if check.id == "embed")]


def written(tmp_path, text: str):
    path = tmp_path / "assignments.toml"
    path.write_text(text)
    return path


def test_points_in_the_file_replace_the_checks_defaults_for_that_assignment_only(tmp_path):
    path = written(
        tmp_path,
        '[[assignment]]\nname = "week1"\ntitle = "Week 1"\ndue = 2027-01-18\n'
        'checks = ["layernorm", "attention*"]\npoints = { layernorm = 5, "attention.causal_mask" = 0 }\n',
    )
    (week1,) = load(path)
    assert [(check.id, check.points) for check in week1.checks] == [
        ("layernorm", 5),
        ("attention.causal_mask", 0),
        ("attention", 3),
    ]
    assert (week1.title, week1.due, week1.max_score) == ("Week 1", "2027-01-18", 8)
    assert next(check for check in registry() if check.id == "layernorm").points == 2


JUNK = {
    "an unknown key": ('[[assignment]]\nname = "w1"\nchecks = ["embed"]\npionts = {}\n', "'w1': unknown key 'pionts'"),
    "an unknown check": ('[[assignment]]\nname = "w1"\nchecks = ["atention"]\n', "'w1': no check matches 'atention'"),
    "a name twice": (
        '[[assignment]]\nname = "w1"\nchecks = ["embed"]\n[[assignment]]\nname = "w1"\nchecks = ["mlp"]\n',
        "'w1': a second assignment of that name",
    ),
    "points for a check not graded": (
        '[[assignment]]\nname = "w1"\nchecks = ["embed"]\npoints = { mlp = 2 }\n',
        "'w1': points for 'mlp', which is not one of its checks",
    ),
    "points that are no whole number": (
        '[[assignment]]\nname = "w1"\nchecks = ["embed"]\npoints = { embed = 1.5 }\n',
        "'w1': the points of 'embed' must be a whole number",
    ),
    "no checks": ('[[assignment]]\nname = "w1"\nchecks = []\n', "'w1': `checks` must be a list of check names"),
    "a due date as text": (
        '[[assignment]]\nname = "w1"\ndue = "Monday"\nchecks = ["embed"]\n',
        "'w1': `due` must be a TOML date",
    ),
    "a name a shell would split": ('[[assignment]]\nname = "week 1"\nchecks = ["embed"]\n', "assignment 1: `name`"),
    "a key outside the tables": ('title = "x"\n', "unknown key 'title'"),
    "no TOML": ("[[assignment]\n", "not TOML"),
}


@pytest.mark.parametrize("junk", JUNK)
def test_a_wrong_file_is_refused_in_one_line_naming_it_and_the_assignment(tmp_path, junk):
    text, said = JUNK[junk]
    path = written(tmp_path, text)
    with pytest.raises(AssignmentError) as raised:
        load(path)
    message = str(raised.value)
    assert message.startswith(f"{path}") and said in message and "\n" not in message


def test_grade_says_the_files_problem_in_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(assignments, "FILE", written(tmp_path, JUNK["an unknown check"][0]))
    assert cli.main(["--assignments"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"grade: {tmp_path / 'assignments.toml'}, assignment 'w1': no check matches 'atention'")
    assert captured.out == ""
