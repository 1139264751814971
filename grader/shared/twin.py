"""A second fork server for the price of a fork: where the grader runs two lanes, the first learner's process, once
torch is imported, forks a twin that serves the second lane over pipes of its own, instead of a second process
importing torch again (about 1.5 s of a core, 300 MB). The grader passes the twin's ends of those pipes and names
them in VARIABLE (`grader.host.launch`); each process then answers on its own pipes, as if started alone.

Standard library only: the fork server and the unit tier's fake worker both call `split`.
"""

from __future__ import annotations

import os
from typing import TextIO

VARIABLE = "GPT2_GRADER_TWIN"  # "<requests fd>,<answers fd>": the twin's ends, inherited from the grader


def split(answers: TextIO) -> TextIO:
    """Where the grader asked for a twin, fork it; the answer channel of the calling process, whichever it is.

    The twin reads its requests on fd 0 and answers on its own pipe. It is forked through a middle process that
    ends at once, so that it is no descendant of its sibling: each fork server ends every process it started after
    each check, and neither may end the other. Call it before anything has read stdin, before `answers` is used."""
    fds = os.environ.pop(VARIABLE, "")
    if not fds:
        return answers
    requests, twin_answers = (int(fd) for fd in fds.split(","))
    try:
        middle = os.fork()
    except OSError:  # no twin: the grader reads the end of its pipe, and the second lane starts a worker of its own
        middle = None
    if middle == 0:  # the middle process: it must end here, whatever happens
        try:
            twin = os.fork()
        except OSError:
            os._exit(1)
        if twin:
            os._exit(0)
        os.dup2(requests, 0)
        os.close(requests)
        answers.close()
        return os.fdopen(twin_answers, "w")
    if middle is not None:
        os.waitpid(middle, 0)
    os.close(requests)
    os.close(twin_answers)
    return answers
