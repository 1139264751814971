"""Gradescope: `grade --gradescope FILE` (`writer`: results.json, its schema results.schema.json, read back by the
class view), and its autograder zip (`python -m grader.host.platforms.gradescope.bundle`, `make gradescope`: the
learner repository with `setup.sh` and `run_autograder`)."""

from grader.host.platforms import Platform
from grader.host.render import Option

PLATFORM = Platform(
    (Option("--gradescope", "also write the results as Gradescope's results.json to FILE", value="FILE"),),
    read_backs=("READ_BACK",),
)
