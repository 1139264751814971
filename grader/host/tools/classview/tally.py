"""What a class's results add up to: each check's statuses, the named mistakes by how many learners made them (and
who), the checks where learners stop (their first todo), each learner's checks that errored or timed out with the
reason, the grades in doubt, and the scores.

A learner who could not be graded (no status at all: batch's null report, a gradebook row with its error alone, a
Classroom entry without a submission) is counted apart, and left out of every count, the median and the scores.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from grader.checks import registry
from grader.host.assignments import Assignment
from grader.host.course import page_path
from grader.host.results import STOPPED
from grader.host.tools.classview.reader import Learner


def pseudonym(name: str) -> str:
    """A learner's stand-in name: the same name always gives the same one. Stable, not secret: anyone holding the
    class list can compute them."""
    return "learner-" + hashlib.sha256(name.encode()).hexdigest()[:6]


def anonymised(learners: Iterable[Learner]) -> list[Learner]:
    """Each learner under their pseudonym, and every name of the class in the texts their results hold (an error's
    message may quote a path, a forged result anything) replaced by its pseudonym too."""
    learners = list(learners)
    names = sorted({learner.name for learner in learners if learner.name}, key=len, reverse=True)
    if not names:
        return learners
    named = re.compile("|".join(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])" for name in names))

    def hidden(text: str) -> str:
        return named.sub(lambda found: pseudonym(found.group()), text)

    return [
        replace(
            learner,
            name=pseudonym(learner.name),
            mistakes={check: hidden(words) for check, words in learner.mistakes.items()},
            errors={check: hidden(reason) for check, reason in learner.errors.items()},
            ungraded=hidden(learner.ungraded),
            flag=hidden(learner.flag),
        )
        for learner in learners
    ]


@dataclass(frozen=True)
class NamedMistake:
    check: str
    words: str  # the grader's own
    names: tuple[str, ...]  # the learners it caught, by name
    page: str | None

    @property
    def learners(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class Stopped:
    """A learner's checks that errored or timed out for one reason (a file that does not import stops several)."""

    learner: str
    status: str  # error or timeout
    reason: str  # the check's message: the exception and its file:line, the line an import hung at
    checks: tuple[str, ...]  # in course order


@dataclass(frozen=True)
class ClassView:
    learners: list[Learner]  # those graded, the best score first, then by name
    ungraded: list[Learner]  # by name
    checks: list[str]  # in course order, then those the registry does not know (an older report's), as first seen
    statuses: dict[str, Counter]  # check -> status -> learners
    mistakes: list[NamedMistake]  # the most learners first
    stops: list[tuple[str, int]]  # check, the learners whose first todo it is; the most first
    pages: dict[str, str]  # check -> its course page
    stopped: list[Stopped]  # by learner, then the first check in course order
    flagged: list[Learner]  # every learner whose recorded grade is in doubt (Learner.flag), by name
    assignment: str | None = None  # the course's assignment the view is of (--assignment): its checks and points only

    def graded_on(self, check: str) -> int:
        return sum(self.statuses[check].values())

    def pass_rate(self, check: str) -> float:
        return self.statuses[check]["pass"] / self.graded_on(check)  # every check listed has a status somewhere

    def lowest_pass_rates(self, count: int) -> list[str]:
        """The `count` checks with the lowest pass rates, the earliest in the course first among equals."""
        return sorted(self.checks, key=self.pass_rate)[:count]

    @property
    def median_score(self) -> float | None:
        return statistics.median(learner.score for learner in self.learners) if self.learners else None

    @property
    def max_score(self) -> float:
        """The largest maximum: the same for every learner of a class graded on the same checks."""
        return max((learner.max_score for learner in self.learners), default=0)

    def score_counts(self) -> list[tuple[float, int]]:
        """Each score some learner has, the lowest first, with how many have it."""
        return sorted(Counter(learner.score for learner in self.learners).items())

    @property
    def finished(self) -> int:
        """The learners with no todo check."""
        return len(self.learners) - sum(count for _, count in self.stops)


def on_assignment(learner: Learner, assignment: Assignment) -> Learner:
    """The learner's results on the assignment's checks only, scored with its points: the same for every learner,
    whatever each was graded on. One graded on none of its checks could not be graded on it."""
    points = {check.id: check.points for check in assignment.checks}
    statuses = {check: status for check, status in learner.statuses.items() if check in points}
    score = sum(points[check] for check, status in statuses.items() if status == "pass")
    mistakes = {check: words for check, words in learner.mistakes.items() if check in points}
    errors = {check: reason for check, reason in learner.errors.items() if check in points}
    ungraded = learner.ungraded or ("" if statuses else f"graded on none of assignment {assignment.name}'s checks")
    return replace(
        learner,
        statuses=statuses,
        mistakes=mistakes,
        errors=errors,
        score=score,
        max_score=assignment.max_score,
        ungraded=ungraded,
    )


def tally(learners: Iterable[Learner], assignment: Assignment | None = None) -> ClassView:
    learners = [on_assignment(learner, assignment) for learner in learners] if assignment else list(learners)
    graded = sorted((learner for learner in learners if learner.graded), key=lambda ln: (-ln.score, ln.name))
    course = {check.id: page_path(check) for check in registry()}  # in course order
    seen = dict.fromkeys(check for learner in graded for check in learner.statuses)
    checks = [check for check in course if check in seen] + [check for check in seen if check not in course]
    pages = {check: course.get(check) or given_page(check, graded) for check in checks}
    graded_by_name = sorted(graded, key=lambda ln: ln.name)
    return ClassView(
        graded,
        sorted((learner for learner in learners if not learner.graded), key=lambda ln: ln.name),
        checks,
        {check: Counter(ln.statuses[check] for ln in graded if check in ln.statuses) for check in checks},
        ranked_mistakes(graded, checks, pages),
        first_todos(graded, checks),
        {check: page for check, page in pages.items() if page},
        [stop for learner in graded_by_name for stop in stopped(learner, checks)],
        [learner for learner in sorted(learners, key=lambda ln: ln.name) if learner.flag],
        assignment.name if assignment else None,
    )


def given_page(check: str, learners: list[Learner]) -> str | None:
    """The course page the inputs name for a check this registry does not know: the first learner's that names one."""
    return next((learner.pages[check] for learner in learners if check in learner.pages), None)


def ranked_mistakes(learners: list[Learner], checks: list[str], pages: dict[str, str | None]) -> list[NamedMistake]:
    """Each (check, mistake) with the learners it caught: the most first, then in course order, then by its words."""
    caught: dict[tuple[str, str], list[str]] = {}
    for learner in sorted(learners, key=lambda ln: ln.name):
        for check, words in learner.mistakes.items():
            caught.setdefault((check, words), []).append(learner.name)
    place = {check: index for index, check in enumerate(checks)}
    ranked = sorted(caught.items(), key=lambda item: (-len(item[1]), place[item[0][0]], item[0][1]))
    return [NamedMistake(check, words, tuple(names), pages[check]) for (check, words), names in ranked]


def stopped(learner: Learner, checks: list[str]) -> list[Stopped]:
    """The learner's checks that errored or timed out, grouped by status and reason, in course order."""
    reasons: dict[tuple[str, str], list[str]] = {}
    for check in checks:
        status = learner.statuses.get(check)
        if status in STOPPED:
            reasons.setdefault((status, learner.errors.get(check) or status), []).append(check)
    return [Stopped(learner.name, status, reason, tuple(ids)) for (status, reason), ids in reasons.items()]


def first_todos(learners: list[Learner], checks: list[str]) -> list[tuple[str, int]]:
    """Where learners stop: each learner's first todo check in course order, counted; the most first."""
    stops = Counter(
        next(check for check in checks if learner.statuses.get(check) == "todo")
        for learner in learners
        if "todo" in learner.statuses.values()
    )
    return sorted(stops.items(), key=lambda item: (-item[1], checks.index(item[0])))
