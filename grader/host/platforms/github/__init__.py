"""GitHub Actions: `grade --github` (the step summary, annotations at the learner's lines, the score as a notice) and
the workflow that runs it on each push (.github/workflows/grade.yml). Its writer: `writer`."""

from grader.host.platforms import Platform
from grader.host.render import Option

PLATFORM = Platform(
    (Option("--github", "under GitHub Actions: a step summary, annotations at your lines, the score as a notice"),)
)
