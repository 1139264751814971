"""`python -m grader.learner`: the learner's process, as `grader.host.runner.worker.Worker` starts it."""

from grader.learner.server import serve

serve()
