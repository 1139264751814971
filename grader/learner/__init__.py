"""The learner's process: runs the learner's code and sends back nothing but tensors and facts.

Started by `grader.host.runner.worker.Worker` as `python -m grader.learner`. It says `wire.READY` once torch is
imported, then reads one `wire.Request` per line on stdin and, once the check's process has
ended, answers with one `wire.WorkerAnswer` line on its stdout (all else printed goes to stderr).
The check's process writes its reply and its outputs into the check's scratch directory, where
the grader reads and validates them: it imports the learner's package under a private name,
never the reference, and every comparison happens in the grader.

When the request says `fork` (Linux) this process is a fork server that never runs learner code
itself: it imports torch once, then runs each check in a forked copy of itself, confined by
`grader.shared.sandbox`, within a deadline and a memory limit for the check's processes as a whole, and
kills whatever the check started once it ends. Otherwise checks run in this process in turn,
unconfined; the grader enforces their timeouts and replaces this process when one ends it.

The learner's modules, weights and inputs go to the request's device; outputs come back on the CPU.
"""
