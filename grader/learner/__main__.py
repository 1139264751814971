"""`python -m grader.learner`: the learner's process, as `runner.Worker` starts it."""

from grader.learner.server import serve

serve()
