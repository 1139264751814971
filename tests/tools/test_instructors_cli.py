"""Every `gh` command docs/instructors.md gives is one the real CLI has, with flags it has and as many arguments.

The table, tests/tools/classroom50_cli.json, was extracted by hand from the CLIs' own repositories (no text or code
copied), and names its sources there:
- foundation50/classroom50 at 0343327c7678fefeaf3a89dd44a23bcc186d484b: wiki/gh-teacher.md (every `gh teacher`
  command, its arguments and flags), wiki/Autograders.md (`--allowed-files`, `submission_mode`, the vacuous 0/0 pass
  where no autograder is published);
- foundation50/classroom50 at 09bd4ed1d987eae6c1099a84f620cc9e3f3a4465: wiki/gh-student.md, wiki/Installation.md;
- foundation50/classroom50 at 025902e3a65e95d78971a6ac6626ac848af7102b: cli/CHANGELOG.md (1.19.0 restricts accept to
  enrolled classroom members);
- foundation50/classroom50: cli/gh-teacher/skeleton/dotgithub/workflows/regrade.yaml at 0f39e0ae (inputs classroom,
  assignment, owner) and collect-scores.yaml at 640300aa (inputs classroom, assignment);
- foundation50/classroom50 at 0271935840c327a330dc30c6a4e727854b2e58dd: wiki/Assignment-Templates.md (a template
  needs a commit and the Template repository flag);
- cli/cli: pkg/cmd/repo/create/create.go at 00b2777a, pkg/cmd/repo/edit/edit.go at 01f53b11 (`--template`),
  pkg/cmd/repo/clone/clone.go at 2753f6fa, pkg/cmd/workflow/run/run.go at 6a137c9a (`-f`, `-R/--repo`).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from repo import REPO

TABLE = json.loads((Path(__file__).parent / "classroom50_cli.json").read_text())
INSTRUCTORS = REPO / "docs" / "instructors.md"
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}


def shell_lines(markdown: str) -> list[tuple[str, bool]]:
    """Each shell line of the page's fenced code blocks (continuations joined), with True; each inline code span
    that starts with `gh `, with False (prose: its arguments are placeholders, not counted)."""
    lines, in_block, pending = [], False, ""
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            pending += line
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            lines.append((pending, True))
            pending = ""
        else:
            lines += [(span, False) for span in re.findall(r"`(gh [^`\s]+ [^`]+)`", line)]
    return lines


def gh_commands(line: str) -> list[list[str]]:
    """The `gh` commands of one shell line, each as its words (comments dropped, split at && ; | and the like)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    commands, words = [], []
    for token in lexer:
        if token in OPERATORS:
            commands.append(words)
            words = []
        else:
            words.append(token)
    commands.append(words)
    return [words for words in commands if words[:1] == ["gh"]]


def problems(words: list[str], count_arguments: bool) -> list[str]:
    """What the table says is wrong with one `gh` command: an unknown command or flag, a flag without its value, a
    number of arguments the command does not take."""
    said = " ".join(words)
    known = [name for name in TABLE["commands"] if words[: len(name.split())] == name.split()]
    if not known:
        return [f"{said}: no such command"]
    name = max(known, key=len)
    spec = TABLE["commands"][name]
    flags = {**TABLE["global_flags"].get(" ".join(words[:2]), {}), **spec["flags"]}
    found, arguments, rest = [], [], iter(words[len(name.split()) :])
    for word in rest:
        if not word.startswith("-") or word == "-":
            arguments.append(word)
            continue
        flag, has_value = word.split("=", 1)[0], "=" in word
        if flag not in flags:
            found.append(f"{said}: {name} has no flag {flag}")
        elif flags[flag] == "value" and not has_value and next(rest, None) is None:
            found.append(f"{said}: {flag} needs a value")
    fewest, most = spec["args"]
    if count_arguments and not fewest <= len(arguments) <= most:
        found.append(f"{said}: {name} takes {fewest} to {most} arguments, not {len(arguments)}")
    return found


def page_problems(markdown: str) -> list[str]:
    return [
        problem
        for line, in_block in shell_lines(markdown)
        for words in gh_commands(line)
        for problem in problems(words, in_block)
    ]


def used_commands(markdown: str) -> set[str]:
    names = set()
    for line, _ in shell_lines(markdown):
        for words in gh_commands(line):
            known = [name for name in TABLE["commands"] if words[: len(name.split())] == name.split()]
            names |= {max(known, key=len)} if known else set()
    return names


def test_every_gh_command_of_the_instructors_page_is_the_real_cli_s():
    markdown = INSTRUCTORS.read_text()
    assert page_problems(markdown) == []
    # The walk through Classroom 50 runs each step with the CLI: the config repository cloned, the roster, the
    # template repository flagged as one, the assignment with its submission mode, regrade, collect and download.
    walk = {
        "gh extension install",
        "gh teacher init",
        "gh teacher classroom add",
        "gh teacher roster import",
        "gh teacher roster add",
        "gh repo create",
        "gh repo edit",
        "gh teacher assignment add",
        "gh teacher assignment submission-mode",
        "gh repo clone",
        "gh workflow run",
        "gh student accept",
        "gh student submit",
        "gh teacher download",
    }
    assert walk - used_commands(markdown) == set()
    assert "--submission-mode" in markdown and "gh repo edit ORG/gpt2-template --template" in markdown


def test_the_check_finds_an_unknown_command_flag_or_count_of_arguments():
    """The control: commands the real CLI would refuse, each found with its reason; good ones pass."""
    page = "\n".join(
        [
            "```sh",
            "gh teacher assignment add ORG CLASSROOM gpt2 --name 'GPT-2' \\",
            "    --template ORG/gpt2-template --submission-mode tag   # a comment --not-a-flag",
            "gh teacher roster add ORG CLASSROOM ada --section=A && gh teacher classroom add ORG c --tag",
            "gh teacher assignment publish ORG CLASSROOM gpt2",
            "gh workflow run regrade.yaml -R ORG/classroom50 -f classroom=c -f assignment=gpt2",
            "gh teacher download ORG CLASSROOM",
            "gh repo create ORG/gpt2-template --template",
            "```",
            "Learners run `gh student accept ORG CLASSROOM gpt2 --force` and `gh student submit`.",
        ]
    )
    assert page_problems(page) == [
        "gh teacher classroom add ORG c --tag: gh teacher classroom add has no flag --tag",
        "gh teacher assignment publish ORG CLASSROOM gpt2: no such command",
        "gh teacher download ORG CLASSROOM: gh teacher download takes 3 to 3 arguments, not 2",
        "gh repo create ORG/gpt2-template --template: gh repo create has no flag --template",
        "gh student accept ORG CLASSROOM gpt2 --force: gh student accept has no flag --force",
    ]
