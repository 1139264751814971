"""`python -m grader.learner`: the learner's process, as `runner.Worker` starts it."""

from .server import serve

serve()
