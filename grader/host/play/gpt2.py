"""GPT-2's side of the playground: `python -m grader.builder.play`, started once and asked one JSON line at a time
(the builder's folder is the only one that imports transformer_lens)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from grader.host.refcache import ReferenceData, gpt2_in_hf_cache
from grader.shared.paths import cache_root

REPOSITORY = Path(__file__).resolve().parents[3]


class Gpt2Unavailable(RuntimeError):
    """The builder's process ended or answered nothing readable; the message says what it last said."""


class Gpt2Process:
    """GPT-2 (or the random reference) loaded in a builder process of its own, as the reference entry's builder loads
    it: the same weights the entry holds."""

    def __init__(self, reference: ReferenceData, log):
        command = [sys.executable, "-m", "grader.builder.play", "--kind", reference.kind]
        command += ["--random-hub", str(cache_root() / "random-hub")]
        if reference.kind == "random" or gpt2_in_hf_cache():  # loaded from the cache the entry was built from
            command.append("--offline")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=REPOSITORY,
            env=os.environ,
        )
        self._answer()  # {"ready": true}, once GPT-2 is loaded

    def ask(self, op: str, **fields) -> dict:
        self.send(op, **fields)
        return self.receive(op)

    def send(self, op: str, **fields) -> None:
        """A request, whose answer `receive` waits for: GPT-2 works on it meanwhile."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self.process.stdin.flush()
        except OSError:
            raise Gpt2Unavailable("GPT-2's process has ended") from None

    def receive(self, op: str) -> dict:
        answer = self._answer()
        if "failed" in answer:
            raise Gpt2Unavailable(f"GPT-2's process could not {op} this text: {answer['failed']}")
        return answer

    def _answer(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise Gpt2Unavailable(f"GPT-2's process ended (exit code {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
