"""The README's table of `grade` options and `grade --help` name the same options, with the same arguments."""

from __future__ import annotations

import re

from repo import REPO

from grader.host.cli import parser

ROW = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)


def readme_options() -> dict[str, str]:
    """option -> what the README writes after it (its argument), from the section's table."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## `grade` options", 1)[1].split("\n## ", 1)[0]
    rows = [cell.replace("\\|", "|") for cell in ROW.findall(section)]
    return {row.split()[0]: " ".join(row.split()[1:]) for row in rows}


def help_options() -> dict[str, str]:
    """option -> its argument as --help shows it: a metavar, its choices joined by |, or nothing."""
    shown = {}
    for action in parser()._actions:
        if not action.option_strings:
            shown[action.metavar] = "..."  # CHECK ...
            continue
        flag = max(action.option_strings, key=len)
        if flag == "--help":
            continue
        argument = "|".join(action.choices) if action.choices else (action.metavar or "")
        shown[flag] = "" if action.nargs == 0 else argument
    return shown


def test_the_readme_table_names_every_option_of_grade_help_and_no_other():
    assert readme_options() == help_options()
