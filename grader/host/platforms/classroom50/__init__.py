"""Classroom 50: `grade --classroom50 DIR` in its runner (`writer`: result.json, its schema result.schema.json,
release-body.md and the step's outputs; result.json and `gh teacher scores`' scores.json read back by the class view),
and its autograder bundle (`python -m grader.host.platforms.classroom50.bundle`, `make classroom50`: `autograder.py`
with this course's grader beside it)."""

from grader.host.platforms import Platform
from grader.host.render import Option

PLATFORM = Platform(
    (
        Option(
            "--classroom50",
            "in Classroom 50's autograder: write DIR/result.json, DIR/release-body.md and, where "
            "$GITHUB_OUTPUT is set, the step's status and summary (needs the runner's environment)",
            value="DIR",
        ),
    ),
    read_backs=("SCORES_READ_BACK", "READ_BACK"),
)
