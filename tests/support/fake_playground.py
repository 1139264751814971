"""A Playground (grader/host/play/session.py) with canned answers of the contract's shape, for the playground's page
and server: the page is tested without the learner's process or a reference. Its words choose the answer:

- "crash": the learner's exception, at a file and line (`error`), with nothing else to show;
- "stub": LayerNorm not written yet, stood in for by the grader's (`stand_ins`, marked in `where`);
- "slow": generate waits until `release` is set (a learner's model still thinking).

Beyond the contract the backend also answers `first_difference` (analyse) and `sampler_stood_in` (generate), and
so does this. Installed as the module `grader.host.play.session` (`Playground`), `grade --play` serves it.
"""

from __future__ import annotations

import contextlib
import threading

LAYERS, HEADS = 12, 12  # GPT-2 small's: the page must fit them
MODULES = ["Embed", "PosEmbed", "LayerNorm", "Attention", "MLP", "TransformerBlock", "Unembed", "Transformer"]
ROUNDING = {"LayerNorm": 4.5e-08}  # a difference that is float rounding
WRONG = "Attention"  # the first module whose output differs, in every answer but a crash's
MISTAKE = "the scores are not scaled: divide q.k by sqrt(d_head)"
CRASH = {"file": "attention.py", "line": 42, "message": "RuntimeError: shape '[1, 5, 12, 64]' is invalid"}
STAND_IN = {"module": "LayerNorm", "why": "LayerNorm.forward raises NotImplementedError"}
YOURS_TOP = [" the", " a", " his", " her", " Mary", " John", " it", " them", " their", " an"]
GPT2_TOP = [" Mary", " the", " her", " a", " John", " his", " them", " it", " an", " their"]


def top(tokens: list[str]) -> list[dict]:
    return [{"token": token, "p": round(0.3 / (rank + 1), 4)} for rank, token in enumerate(tokens)]


def causal_uniform(n: int) -> list[list[float]]:
    return [[1 / (q + 1) if k <= q else 0.0 for k in range(n)] for q in range(n)]


def previous_token(n: int) -> list[list[float]]:
    return [[1.0 if k == max(q - 1, 0) else 0.0 for k in range(n)] for q in range(n)]


def per_head(pattern) -> list[list]:
    return [[pattern for _ in range(HEADS)] for _ in range(LAYERS)]


def lens(tokens: list[str], shift: int) -> list[list[dict]]:
    return [
        [{"token": tokens[(p + layer + shift) % len(tokens)], "p": 0.5} for p in range(len(tokens))]
        for layer in range(LAYERS)
    ]


def scores(value: float) -> list[list[float]]:
    return [[round(value * (head + 1) / HEADS, 3) for head in range(HEADS)] for _ in range(LAYERS)]


def where(stand_ins: list[dict]) -> list[dict]:
    stood_in = {s["module"] for s in stand_ins}
    rows = []
    for index, module in enumerate(MODULES):
        wrong = index >= MODULES.index(WRONG)
        first = module == WRONG
        rows.append(
            {
                "module": module,
                "max_diff": 0.124 if wrong else ROUNDING.get(module, 0.0),
                "first_step": "attn_scores" if first else None,
                "mistake": MISTAKE if first else None,
                "message": ("differs" if wrong else "matches")
                + (" (the grader's stand-in)" if module in stood_in else ""),
            }
        )
    return rows


class Playground:
    def __init__(self, reference: str = "random"):
        self.reference = reference
        self.release = threading.Event()
        self.closed = False

    @classmethod
    def start(cls, package_dir, reference: str, timeout: float) -> Playground:
        return cls("gpt2" if reference == "gpt2" else "random")

    def close(self) -> None:
        self.closed = True
        print("fake playground: closed", flush=True)

    def __enter__(self) -> Playground:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def analyse(self, text: str) -> dict:
        tokens = [word if i == 0 else " " + word for i, word in enumerate(text.split())]
        stand_ins = [STAND_IN] if "stub" in text else []
        n = len(tokens)
        if "crash" in text:  # as the backend answers then: GPT-2's side alone
            return {
                "tokens": tokens,
                "reference": self.reference,
                "stand_ins": stand_ins,
                "next": {"yours": [], "gpt2": top(GPT2_TOP), "max_logit_diff": None},
                "inside": {
                    "patterns": {"yours": None, "gpt2": per_head(previous_token(n))},
                    "logit_lens": {"yours": None, "gpt2": lens(tokens, 1)},
                    "induction": {"yours": None, "gpt2": scores(0.9)},
                    "previous_token": {"yours": None, "gpt2": scores(0.8)},
                },
                "where": [],
                "first_difference": None,
                "error": CRASH,
            }
        inside = {
            "patterns": {"yours": per_head(causal_uniform(n)), "gpt2": per_head(previous_token(n))},
            "logit_lens": {"yours": lens(tokens, 0), "gpt2": lens(tokens, 1)},
            "induction": {"yours": scores(0.1), "gpt2": scores(0.9)},
            "previous_token": {"yours": scores(0.2), "gpt2": scores(0.8)},
        }
        next_token = {"yours": top(YOURS_TOP), "gpt2": top(GPT2_TOP), "max_logit_diff": 3.25}
        return {
            "tokens": tokens,
            "reference": self.reference,
            "stand_ins": stand_ins,
            "next": next_token,
            "inside": inside,
            "where": where(stand_ins),
            "first_difference": {"module": WRONG, "step": "attn_scores"},
            "error": None,
        }

    def generate(
        self,
        text: str,
        max_new_tokens=30,
        temperature=1.0,
        top_k=None,
        top_p=None,
        frequency_penalty=0.0,
        seed=0,
        greedy=False,
    ) -> dict:
        if "slow" in text:
            self.release.wait(timeout=30)
        if "crash" in text:
            return {"yours": None, "gpt2": None, "error": CRASH}
        said = f"greedy={greedy} temperature={temperature:g} top_k={top_k} top_p={top_p} seed={seed}"
        return {
            "yours": {
                "text": text + " your words (" + said + ")",
                "ms_per_token": 41.5,
                "kv_cache": True,
                "ms_per_token_cached": 9.25,
                "sampler_stood_in": "stub" in text,
            },
            "gpt2": {"text": text + " GPT-2's words", "ms_per_token": 30.0},
            "error": None,
        }


@contextlib.contextmanager
def serving(playground: Playground):
    """The playground's server (grader.host.play.app) over `playground`, in a thread: its URL."""
    from grader.host.play import app

    sock = app.listening_socket()
    server = app.server_for(playground)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield app.url_of(sock)
    finally:
        playground.release.set()
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
