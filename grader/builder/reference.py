"""The reference: GPT-2 small through transformer_lens (which only the builder's folder imports).

It runs in its own process (`python -m grader.builder.reference`), builds every registered check's cases
once, or those of the checks named (`--checks`), and writes them to a cache entry (see `refcache`), so grading itself
never imports transformer_lens or transformers.

Two kinds of reference, both loaded by `HookedTransformer.from_pretrained_no_processing("gpt2")`:
- "gpt2": the released weights, from the Hugging Face cache or the hub;
- "random": a seeded random model of GPT-2 small's exact shape, for machines that cannot reach the hub: drawn in the
  builder's process and handed to the same loader (`hf_model`), its config and tokenizer read from a local Hugging Face
  cache (its weights are written once, into the entry, not into that cache as well).

This module is the builder's process: the random model written, the reference loaded, the entry written. What the
checks' case builders call on the loaded reference, `Reference`, is in `grader.builder.interface`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.builder import corpus
from grader.builder.interface import DEFAULT_INPUT_SEED, Reference
from grader.builder.tokenizer import offline_tokenizer
from grader.shared.entry import PROGRESS_PREFIX
from grader.shared.imports import collection_paused
from grader.shared.types import counts_by_part

if TYPE_CHECKING:
    import torch

MODEL_NAME = "gpt2"
MODEL_SEED = 0  # the random model's weights


# --- the random model, built without the hub (its tokenizer: grader.builder.tokenizer) --------------------


def random_hub_snapshot(hub: Path) -> Path:
    return hub / f"models--{MODEL_NAME}" / "snapshots" / random_model_recipe()


def random_model_recipe() -> str:
    """The commit name of the random model's local snapshot: a hash of how its weights are drawn, so that a cache
    holding a model drawn otherwise (by an earlier grader) is written again, not loaded (`write_random_hub`'s
    `weights`: the tests' stand-in for GPT-2's download)."""
    import inspect

    drawn = inspect.getsource(random_gpt2) + inspect.getsource(weight_std)
    scales = repr((MODEL_SEED, TOKEN_EMBEDDING_STD, MLP_IN_STD, MLP_OUT_STD))
    return hashlib.sha1((drawn + scales).encode()).hexdigest()


def random_hub_is_complete(hub: Path) -> bool:
    snapshot = random_hub_snapshot(hub)
    return all((snapshot / name).is_file() for name in ("config.json", "tokenizer.json"))


def random_config():
    """GPT-2 small's config, as its Hugging Face cache holds it (transformer_lens reads its architecture there)."""
    from transformers import GPT2Config

    return GPT2Config(n_ctx=1024, architectures=["GPT2LMHeadModel"])


def write_random_hub(hub: Path, weights: bool = False) -> None:
    """A Hugging Face cache of the seeded random GPT-2 small, written atomically: its config and tokenizer, which the
    random reference loads from it; with `weights`, its weights as well, a complete model cache that
    `from_pretrained("gpt2")` loads as it would the download."""
    import shutil
    import tempfile

    hub.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=hub, prefix=".staging-"))
    snapshot = random_hub_snapshot(staging)
    snapshot.mkdir(parents=True)
    if weights:
        random_gpt2(random_config()).save_pretrained(snapshot)
    else:
        random_config().save_pretrained(snapshot)
    offline_tokenizer().save_pretrained(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(snapshot.name)
    target = hub / f"models--{MODEL_NAME}"
    if target.exists():
        shutil.rmtree(target)
    (staging / f"models--{MODEL_NAME}").rename(target)
    staging.rmdir()


def random_gpt2(config):
    """GPT-2 small with seeded random weights, each drawn once. The modules are made on the meta device, so neither
    torch's initialisation nor transformers' runs (two passes over 124M parameters, the draws then thrown away)."""
    import torch
    from transformers import GPT2LMHeadModel

    with torch.device("meta"):
        model = GPT2LMHeadModel(config)
    model.to_empty(device="cpu")
    model.tie_weights()  # the unembedding is the embedding again, as GPT-2's is
    torch.manual_seed(MODEL_SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            # No parameter may sit at an identity value, or a forgotten term would still pass.
            if name.endswith("bias"):
                param.normal_(0.0, 0.05)
            elif "ln_" in name:
                param.normal_(1.0, 0.2)
            else:
                param.normal_(0.0, weight_std(name, config.n_layer))
    return model


# Trained GPT-2's magnitudes, where its initial ones would hide a mistake within the tolerances: a token embedding
# (tied with the unembedding) whose logits spread by several units, as GPT-2's do; MLP pre-activations spanning
# about -10..10 (GPT-2's: -10..5), where gelu_new and the exact GELU differ by up to 5e-4, not 0.55 wide, where they
# differ by 1e-4 at most; and an MLP that writes about 1 per component into the stream, so that what its activation
# does shows in its output and in the logits.
TOKEN_EMBEDDING_STD, MLP_IN_STD, MLP_OUT_STD = 0.14, 0.08, 0.02
UNEMBEDDING_BIAS_STD = 3.0  # the logits' spread from the context is about 4


def weight_std(name: str, n_layer: int) -> float:
    """A weight's standard deviation: GPT-2's initial 0.02, attention's projection into the residual stream scaled
    down by sqrt(2 n_layer) as GPT-2's is, but trained GPT-2's magnitudes where the tolerances need them."""
    import math

    if name.endswith("wte.weight"):
        return TOKEN_EMBEDDING_STD
    if ".mlp." in name:
        return MLP_IN_STD if ".c_fc." in name else MLP_OUT_STD
    return 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02


# --- the reference loaded (what the checks see of it: grader.builder.interface) ----------------------------


def load(kind: str, seed: int = DEFAULT_INPUT_SEED) -> Reference:
    """Load GPT-2 with every weight processing off, so parameters and activations are GPT-2's own."""
    import torch
    from transformer_lens import HookedTransformer

    drawn = random_gpt2(random_config()) if kind == "random" else None
    model = HookedTransformer.from_pretrained_no_processing(MODEL_NAME, device="cpu", hf_model=drawn)
    model.eval()
    # transformer_lens's Unembed copies W_U transposed at every call (154 MB); W_U held as the transpose of a
    # contiguous matrix makes that copy free: the same values, in the layout of Hugging Face's lm_head.
    model.unembed.W_U = torch.nn.Parameter(model.unembed.W_U.detach().T.contiguous().T)
    if kind == "random":
        # GPT-2 has no unembedding bias, so the loader sets b_U to zeros; make it non-trivial too, and nearly as wide
        # as the logits' spread: like GPT-2's, the random model's logits then favour the same tokens whatever the
        # context, and its greedy text repeats itself (kv_cache's penalised case needs a repetition to name a penalty
        # that counts only the ids fed).
        with torch.no_grad():
            model.unembed.b_U.normal_(0.0, UNEMBEDDING_BIAS_STD, generator=torch.Generator().manual_seed(MODEL_SEED))
    return Reference(model, kind, seed)


# --- the cache entry ----------------------------------------------------------------------------


def write_entry(ref: Reference, out: Path, progress, check_ids: set[str] | None = None) -> None:
    """weights.safetensors and inputs/<check>.safetensors (what the learner may see), expected.safetensors
    and meta.json (the cases, and a digest of every other file): of every check, or of `check_ids` only, with only
    the weights their cases load."""
    from safetensors.torch import save_file

    from grader.checks import registry
    from grader.shared.entry import entry_digests

    expected, cases_meta, held = {}, {}, {}
    checks = [check for check in registry() if check_ids is None or check.id in check_ids]
    (out / "inputs").mkdir()
    for number, check in enumerate(checks):
        progress(f"computing GPT-2's outputs for {check.id}", 0.3 + 0.6 * number / len(checks))
        if number and check.part != checks[number - 1].part:
            ref.activations.cache_clear()  # a part's activations (hundreds of MB for the long cases) go with it
        inputs, answers_of_check, cases_meta[check.id] = check_files(check.id, check.cases(ref))
        expected |= answers_of_check
        held[check.id] = Held(digests(inputs), digests(answers_of_check), maps_whole_gpt2(cases_meta[check.id]))
        save_file(contiguous(inputs), str(out / "inputs" / f"{check.id}.safetensors"))
    save_file(contiguous(expected), str(out / "expected.safetensors"))
    del expected  # the builder's peak memory: the model, and one file's tensors at a time
    progress("writing the reference weights", 0.9)
    loaded = loaded_weights(cases_meta) if check_ids is not None else ("",)
    named = ref.model.named_parameters()
    parameters = contiguous({name: param.detach() for name, param in named if name.startswith(loaded)})
    save_file(parameters, str(out / "weights.safetensors"))
    vocabulary = [
        ref.tokenizer.decode([token]) for token in range(ref.d_vocab)
    ]  # for the figures: no tokenizer at grading
    (out / "vocabulary.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    meta = {
        "reference": ref.kind,
        "seed": ref.seed,
        "param_counts": counts_by_part((name, param.numel()) for name, param in ref.model.named_parameters()),
        "cases": cases_meta,
        "beside": may_run_beside(held),
        "prompt_tokens": ref.tokens["prompt"][0].tolist(),
        "small_model": small_model_facts(ref) if check_ids is None or used_small_models(ref) else {},
        "digests": entry_digests(out),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def check_files(check_id: str, cases) -> tuple[dict, dict, list[dict]]:
    """One check's cases as the entry holds them: its inputs (what the learner may see), its expected answers (the
    outputs, steps and mistakes' outputs) and each case's spec for meta.json."""
    from grader.shared import wire

    inputs, answers_of_check, specs = {}, {}, []
    for case in cases:
        for i, arg in enumerate(case.args):
            inputs[wire.ARG.format(case=case.name, i=i)] = arg
        for param, value in case.overrides.items():
            inputs[wire.OVERRIDE.format(case=case.name, parameter=param)] = value
        for name, value in case.extra.items():
            inputs[wire.EXTRA.format(case=case.name, name=name)] = value
        answers = {case.name: case.expected}
        answers |= {wire.STEP.format(case=case.name, label=label): value for label, value in case.steps.items()}
        answers |= {wire.MISTAKE.format(case=case.name, i=i): value for i, value in enumerate(case.mistakes.values())}
        answers_of_check |= {wire.EXPECTED.format(check=check_id, case=name): v for name, v in answers.items()}
        spec = wire.CaseSpec(
            case.name,
            len(case.args),
            case.weights,
            sorted(case.overrides),
            case.hint,
            list(case.steps),
            list(case.mistakes),
            case.config,
        )
        specs.append(asdict(spec))
    return inputs, answers_of_check, specs


def loaded_weights(cases_meta: dict[str, list[dict]]) -> tuple[str, ...]:
    """The prefixes of the weights the cases load (a case's `weights`; "" the whole model)."""
    return tuple(
        sorted({case["weights"] for cases in cases_meta.values() for case in cases if case["weights"] is not None})
    )


def used_small_models(ref: Reference) -> bool:
    """Whether a case was built on a small model, whose figures need `small_model_facts`."""
    return bool(ref.induction_model.cache_info().currsize or ref.attn_only_model.cache_info().currsize)


@dataclass(frozen=True)
class Held:
    """What one check's cases hold: its inputs' and its expected answers' values, hashed, and whether a case maps the
    whole of GPT-2 (weights "" and no model of its own)."""

    inputs: set[str]
    expected: set[str]
    whole_model: bool


def digests(tensors: dict[str, torch.Tensor]) -> set[str]:
    """Each tensor's values, hashed whatever their shape and width (floats as float64, the rest as int64: a float32
    input tells a float64 answer as well); scalars left out (a 1 or a 0 tells nothing)."""
    import torch

    return {
        hashlib.sha256(
            t.detach().to(torch.float64 if t.is_floating_point() else torch.int64).numpy().tobytes()
        ).hexdigest()
        for t in tensors.values()
        if t.numel() > 1
    }


def maps_whole_gpt2(cases: list[dict]) -> bool:
    return any(case["weights"] == "" and not case["config"] for case in cases)


def may_run_beside(held: dict[str, Held]) -> list[str]:
    """The checks that may run beside any other (runner.lanes.Schedule): none of their cases maps the whole model,
    their inputs hold no other check's expected answer and no other check's inputs hold theirs, by value. Two of the
    others never run at once: they could pass each other what one holds and the other must answer, or each map the
    whole model."""
    beside = []
    for check_id, mine in held.items():
        others = [theirs for other, theirs in held.items() if other != check_id]
        tells = any(mine.inputs & theirs.expected or mine.expected & theirs.inputs for theirs in others)
        if not mine.whole_model and not tells:
            beside.append(check_id)
    return beside


def small_model_facts(ref: Reference) -> dict:
    """For the figures of the small models: the text of each of the induction model's token ids (the corpus's ids, by
    frequency, in the tokenizer's words) and the logit lens's case on it with its tokens; the text of each of the
    attention-only model's token ids."""
    from grader.shared.formats import SMALL_LENS

    small = ref.induction_model()
    gpt2_ids = ref.corpus().capped(small.d_vocab).gpt2_ids.tolist()  # its last id the rare-token bucket
    lens_tokens = small.tokens[SMALL_LENS][0].tolist() if SMALL_LENS in small.tokens else []
    vocabulary = [corpus.RARE_TEXT if token == corpus.RARE else ref.tokenizer.decode([token]) for token in gpt2_ids]
    attn_only = ref.attn_only_model().texts  # the skip-trigram tables' tokens, in the vocabulary it ships with
    return {"vocabulary": vocabulary, "lens_case": SMALL_LENS, "lens_tokens": lens_tokens, "attn_only": attn_only}


def contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors safetensors can write: each contiguous and alone in its memory. A view, or a tensor
    already written under another name, is copied; the rest is written as it is."""
    written: set[int] = set()
    result = {}
    for key, value in tensors.items():
        storage = value.untyped_storage()
        alone = value.is_contiguous() and storage.nbytes() == value.nbytes and storage.data_ptr() not in written
        result[key] = value if alone else value.clone().contiguous()
        written.add(result[key].untyped_storage().data_ptr())
    return result


def prepared(kind: str, random_hub: Path | None, offline: bool, progress, seed: int = DEFAULT_INPUT_SEED) -> Reference:
    """The reference loaded as every builder process loads it: offline where asked or random, the random model
    written first where its cache is not complete."""
    # Both are read when huggingface_hub is first imported, which happens only below.
    if kind == "random":
        os.environ["HF_HUB_CACHE"] = str(random_hub)
    if offline or kind == "random":
        os.environ["HF_HUB_OFFLINE"] = "1"
    if kind == "random" and not random_hub_is_complete(random_hub):
        progress("writing the random GPT-2 small's config and tokenizer as a local model cache", 0.0)
        write_random_hub(random_hub)
    progress(f"loading {kind} with transformer_lens", 0.1)
    import torch

    # One thread, as in the checks (grader.learner.cases): the same sums in the same order on any machine. And where
    # the cores are shared, a second thread makes each of the reference's many small operations wait for it to be
    # scheduled: Part 1's reference took four times as long on two (bench/results.md, "What a push costs").
    torch.set_num_threads(1)
    with collection_paused():  # transformer_lens's import, the model's modules: all alive to the end
        return load(kind, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build one reference cache entry (run by the grader).")
    parser.add_argument("--kind", choices=("gpt2", "random"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--offline", action="store_true", help="use only the local Hugging Face cache")
    parser.add_argument("--random-hub", type=Path, help="where the random model's Hugging Face cache lives")
    parser.add_argument("--seed", type=int, default=DEFAULT_INPUT_SEED, help="seed of the random inputs")
    parser.add_argument("--checks", help="the ids of the checks whose cases to build, by commas (default: every check)")
    args = parser.parse_args(argv)

    def progress(message: str, fraction: float) -> None:
        print(f"{PROGRESS_PREFIX}{fraction:.3f} {message}", file=sys.stderr, flush=True)

    ref = prepared(args.kind, args.random_hub, args.offline, progress, args.seed)
    write_entry(ref, args.out, progress, set(args.checks.split(",")) if args.checks else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
