"""The playground's GPT-2 (`grader.host.play`): a builder process kept alive across requests, GPT-2 (or the random
reference) loaded once as the reference builder loads it. Asked one JSON line at a time on stdin, it answers one
JSON line on stdout:

- `analyse`: the typed text's tokens, GPT-2's top 10 next tokens, its attention patterns and logit lens, and a small
  reference entry (`out`) whose cases are Part 1's module checks on this text, built by the checks' own case
  builders' pieces (the same steps and named mistakes as a grading), for the grader's process to judge the
  learner's modules against;
- `generate`: GPT-2's continuation with the grader's own sampler, under the settings the learner's sampler gets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from grader.builder.interface import Reference
from grader.builder.reference import check_files, contiguous, prepared

PLAY = "play"  # the typed text's token set, and its cases' name
TOP = 10  # next tokens listed
MAX_TOKENS = 64  # of the text, BOS included: 12 x 12 patterns of 64 x 64 each side are about 6 MB of JSON
DIGITS = 4  # of a pattern's weights


def play_cases(ref: Reference) -> dict:
    """Part 1's module checks, each on the typed text: the input GPT-2 gives that module there (the first block's
    for the block's parts), its output, steps and named mistakes, from the checks' own builders."""
    from grader.checks import Case
    from grader.checks.model import attention, block, layernorm, mlp, pos_embed, transformer
    from grader.checks.model._common import offset_args, sublayer_case, sublayer_input

    acts, tokens, last = ref.activations(PLAY), ref.tokens[PLAY], ref.n_layers - 1
    W_pos, b_U = ref.parameters_of("pos_embed")["W_pos"], ref.weight("unembed.b_U")
    positions = ref.call("pos_embed", tokens, 0)
    normalized = ref.call("ln_final", acts[f"blocks.{last}.hook_resid_post"])
    logits = acts["unembed.hook_out"]

    def sublayer(name, norm, hook, steps, mistakes):
        x = sublayer_input(ref, PLAY, 0, norm, hook)
        return sublayer_case(ref, PLAY, f"blocks.0.{name}", x, steps, mistakes)

    return {
        "embed": [Case(PLAY, [tokens], acts["hook_embed"], weights="embed.")],
        "pos_embed": [
            Case(
                PLAY,
                offset_args(tokens, 0),
                positions,
                weights="pos_embed.",
                steps={"output": positions},
                mistakes=pos_embed.batch_axis_mistakes(W_pos, tokens),
            )
        ],
        "layernorm": [layernorm._layernorm_case(ref, PLAY, "blocks.0.ln1", acts["blocks.0.hook_resid_pre"])],
        "attention": [
            attention.with_unscaled_scores(
                sublayer("attn", "ln1", "hook_resid_pre", attention.ATTENTION_STEPS, attention.attention_mistakes)
            )
        ],
        "mlp": [
            sublayer(
                "mlp",
                "ln2",
                "hook_resid_mid",
                {"pre": "hook_pre", "post": "hook_post"},
                lambda seen, weights: mlp.mlp_mistakes(seen["hook_pre"], weights, ref.gelu_new),
            )
        ],
        "block": [block._block_case(ref, PLAY, 0, acts["blocks.0.hook_resid_pre"])],
        "unembed": [
            Case(
                PLAY,
                [normalized],
                logits,
                weights="unembed.",
                mistakes={"b_U is not added to the logits": logits - b_U},
            )
        ],
        "transformer": [transformer._transformer_case(ref, PLAY, PLAY)],
    }


def write_play_entry(ref: Reference, out: Path) -> None:
    """inputs/<check>.safetensors, expected.safetensors and the cases (cases.json) of the typed text; the weights and
    the vocabulary are the reference entry's, which the grader's process links in beside them."""
    from safetensors.torch import save_file

    expected, cases = {}, {}
    (out / "inputs").mkdir(parents=True, exist_ok=True)
    for check_id, check_cases in play_cases(ref).items():
        inputs, answers, cases[check_id] = check_files(check_id, check_cases)
        expected |= answers
        save_file(contiguous(inputs), str(out / "inputs" / f"{check_id}.safetensors"))
    save_file(contiguous(expected), str(out / "expected.safetensors"))
    (out / "cases.json").write_text(json.dumps(cases))


def top(logits, ref: Reference, k: int = TOP) -> list[dict]:
    probabilities = logits.float().softmax(-1)
    values, ids = probabilities.topk(k)
    return [
        {"token": ref.tokenizer.decode([i]), "p": float(p)} for p, i in zip(values.tolist(), ids.tolist(), strict=True)
    ]


def analyse(ref: Reference, text: str, out: str) -> dict:
    """GPT-2 on the text (BOS first, cut at MAX_TOKENS): its tokens, next tokens, patterns and logit lens; the play
    entry written to `out`."""
    import torch

    whole = ref.model.to_tokens(text, prepend_bos=True).cpu()
    tokens = whole[:, :MAX_TOKENS]
    ref.tokens[PLAY] = tokens
    ref.activations.cache_clear()  # the last text's
    acts = ref.activations(PLAY)
    write_play_entry(ref, Path(out))
    patterns = torch.stack([acts[f"blocks.{layer}.attn.hook_pattern"][0] for layer in range(ref.n_layers)])
    lens = ref.logit_lens(tokens)[:, 0].softmax(-1).max(-1)
    return {
        "ids": tokens[0].tolist(),
        "tokens": [ref.tokenizer.decode([i]) for i in tokens[0].tolist()],
        "next": top(acts["unembed.hook_out"][0, -1], ref),
        "patterns": patterns.round(decimals=DIGITS).tolist(),
        "cut": whole.shape[1] > MAX_TOKENS,
        "logit_lens": lens_cells(ref, lens.values, lens.indices),
    } | saved_logits(acts["unembed.hook_out"][0, -1], Path(out))


def saved_logits(logits, out: Path) -> dict:
    """The last position's logits, for the largest difference from the learner's (no JSON of 50,257 floats)."""
    import numpy as np

    np.save(out / "logits.npy", logits.float().numpy())
    return {"logits_file": str(out / "logits.npy")}


def lens_cells(ref: Reference, p, ids) -> list[list[dict]]:
    """[layer][position] -> the top token and its probability."""
    return [
        [{"token": ref.tokenizer.decode([i]), "p": float(q)} for q, i in zip(row_p, row_i, strict=True)]
        for row_p, row_i in zip(p.tolist(), ids.tolist(), strict=True)
    ]


class CachedModel:
    """GPT-2 as a sampler calls it, (1, posn) -> logits whose last position predicts the next token, fed only the
    positions it has not seen yet (transformer_lens's key-value cache, `Reference.incremental_logits`)."""

    def __init__(self, ref: Reference):
        self.cfg, self.step, self.seen = ref.model.cfg, ref.incremental_logits(), 0

    def __call__(self, tokens):
        ids = tokens[0].tolist()
        logits = self.step(ids[self.seen :])
        self.seen = len(ids)
        return logits[None, None]


def generate(ref: Reference, request: dict) -> dict:
    """GPT-2's continuation by the grader's own sampler, seeded once as the learner's is, on GPT-2's key-value cache."""
    import torch

    from grader.learner.drivers.stand_in_parts import TransformerSampler

    sampler = TransformerSampler(CachedModel(ref), ref.tokenizer)
    torch.manual_seed(request["seed"])
    start = time.perf_counter()
    text = sampler.sample(request["text"], request["max_new_tokens"], **request["settings"])
    generated = len(ref.tokenizer.encode(text)) - len(ref.tokenizer.encode(request["text"]))
    return {"text": text, "ms_per_token": 1000 * (time.perf_counter() - start) / max(generated, 1)}


def tokenizer_text(ref: Reference) -> dict:
    """GPT-2's tokenizer, serialised, for the learner's sampler (its process may not import transformers)."""
    return {"tokenizer": ref.tokenizer.backend_tokenizer.to_str()}


HANDLERS = {
    "analyse": lambda ref, request: analyse(ref, request["text"], request["out"]),
    "generate": generate,
    "tokenizer": lambda ref, _request: tokenizer_text(ref),
}


def serve(ref: Reference, answers) -> None:
    """One answer a request, until stdin closes; an error answered as such, and the next request served."""
    import torch

    torch.set_num_threads(1)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            with torch.no_grad():
                answer = HANDLERS[request["op"]](ref, request)
        except Exception as error:  # the grader's own code, on the learner's text: said, and the process goes on
            answer = {"failed": f"{type(error).__name__}: {error}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The playground's GPT-2 (run by the grader).")
    parser.add_argument("--kind", choices=("gpt2", "random"), required=True)
    parser.add_argument("--offline", action="store_true", help="use only the local Hugging Face cache")
    parser.add_argument("--random-hub", type=Path, help="where the random model's Hugging Face cache lives")
    args = parser.parse_args(argv)
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the libraries print goes to stderr, never among the answers
    ref = prepared(args.kind, args.random_hub, args.offline, lambda message, _fraction: print(message, file=sys.stderr))
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    serve(ref, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
