"""The reference: GPT-2 small through transformer_lens (which only the builder's folder imports).

It runs in its own process (`python -m grader.builder.reference`), builds every registered check's cases
once and writes them to a cache entry (see `refcache`), so grading itself never imports
transformer_lens or transformers.

Two kinds of reference, both loaded by `HookedTransformer.from_pretrained_no_processing("gpt2")`:
- "gpt2": the released weights, from the Hugging Face cache or the hub;
- "random": a seeded random model of GPT-2 small's exact shape, written as a local Hugging Face
  cache and loaded through the same code, for machines that cannot reach the hub.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from grader.builder import corpus
from grader.builder.tokenizer import offline_tokenizer
from grader.shared.entry import PROGRESS_PREFIX
from grader.shared.imports import collection_paused
from grader.shared.types import counts_by_part

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from transformer_lens import ActivationCache, HookedTransformer

MODEL_NAME = "gpt2"
PROMPT = "The cat sat on the mat"
MODEL_SEED = 0  # the random model's weights
DEFAULT_INPUT_SEED = 0  # the random inputs; `grade --seed N` picks others
SNAPSHOT = "0" * 40  # the commit name of the random model's local snapshot


# --- the random model, built without the hub (its tokenizer: grader.builder.tokenizer) --------------------


def random_hub_snapshot(hub: Path) -> Path:
    return hub / f"models--{MODEL_NAME}" / "snapshots" / SNAPSHOT


def random_hub_is_complete(hub: Path) -> bool:
    snapshot = random_hub_snapshot(hub)
    return all((snapshot / name).is_file() for name in ("config.json", "model.safetensors", "tokenizer.json"))


def write_random_hub(hub: Path) -> None:
    """A Hugging Face cache holding a seeded random GPT-2 small, written atomically."""
    import tempfile

    from transformers import GPT2Config

    hub.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=hub, prefix=".staging-"))
    snapshot = random_hub_snapshot(staging)
    snapshot.mkdir(parents=True)
    random_gpt2(GPT2Config(n_ctx=1024)).save_pretrained(snapshot)
    offline_tokenizer().save_pretrained(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(SNAPSHOT)
    target = hub / f"models--{MODEL_NAME}"
    if target.exists():
        import shutil

        shutil.rmtree(target)
    (staging / f"models--{MODEL_NAME}").rename(target)
    staging.rmdir()


def random_gpt2(config):
    """GPT-2 small with seeded random weights, each drawn once. The modules are made on the meta device, so neither
    torch's initialisation nor transformers' runs (two passes over 124M parameters, the draws then thrown away)."""
    import math

    import torch
    from transformers import GPT2LMHeadModel

    with torch.device("meta"):
        model = GPT2LMHeadModel(config)
    model.to_empty(device="cpu")
    model.tie_weights()  # the unembedding is the embedding again, as GPT-2's is
    torch.manual_seed(MODEL_SEED)
    residual_std = 0.02 / math.sqrt(2 * config.n_layer)  # GPT-2's own scale for the projections into the residual
    with torch.no_grad():
        for name, param in model.named_parameters():
            # No parameter may sit at an identity value, or a forgotten term would still pass.
            if name.endswith("bias"):
                param.normal_(0.0, 0.05)
            elif "ln_" in name:
                param.normal_(1.0, 0.2)
            else:
                param.normal_(0.0, residual_std if name.endswith("c_proj.weight") else 0.02)
    return model


# --- the loaded reference, as the checks see it -------------------------------------------------


class Reference:
    """GPT-2 behind a small tensor interface: activations, module calls and parameters."""

    def __init__(self, model: HookedTransformer, kind: str, seed: int = DEFAULT_INPUT_SEED, bos: int | None = None):
        import torch

        self.model = model
        self.kind = kind
        self.bos = model.tokenizer.bos_token_id if bos is None else bos  # the id a sequence begins with
        self.n_layers = model.cfg.n_layers
        self.n_heads = model.cfg.n_heads
        self.n_ctx = model.cfg.n_ctx
        self.d_model = model.cfg.d_model
        self.d_vocab = model.cfg.d_vocab
        self.layer_norm_eps = model.cfg.eps
        self.seed = seed
        self.prompt = PROMPT  # the text of the "prompt" tokens, for case builders that need it as text
        self.generator = torch.Generator().manual_seed(seed)
        # A model without a tokenizer (the small induction model) has no prompt.
        prompt = {"prompt": model.to_tokens(PROMPT, prepend_bos=True).cpu()} if model.tokenizer else {}
        self.tokens = prompt | {"random": torch.randint(0, self.d_vocab, (2, 12), generator=self.generator)}

    @cache  # noqa: B019 (one Reference lives as long as the builder process)
    def activations(self, tokens_name: str) -> dict[str, torch.Tensor]:
        """Every hook activation of GPT-2 on one of `self.tokens`."""
        import torch

        with torch.no_grad():
            _, activation_cache = self.model.run_with_cache(self.tokens[tokens_name])
        return {name: value.detach() for name, value in activation_cache.items()}  # the cache is this call's alone

    def long_tokens(self, posn: int) -> str:
        """The name of a (1, posn) token set, BOS then seeded random ids, added to `self.tokens` once.

        Its own generator, so adding it leaves every other random input as it was."""
        import torch

        name = f"long{posn}"
        if name not in self.tokens:
            generator = torch.Generator().manual_seed(1_000_003 * self.seed + posn)
            ids = torch.randint(0, self.d_vocab, (1, posn), generator=generator)
            ids[0, 0] = self.tokens["prompt"][0, 0]  # BOS: where real GPT-2's residual norm is largest
            self.tokens[name] = ids
        return name

    def largest_first_position_norm(self, token_sets: tuple[str, ...]) -> float:
        """The largest norm of the first position's residual stream, over every block and these token sets."""
        hooks = [
            f"blocks.{layer}.hook_resid_{site}" for layer in range(self.n_layers) for site in ("pre", "mid", "post")
        ]
        return max(
            float(self.activations(name)[hook][:, 0].norm(dim=-1).max()) for name in token_sets for hook in hooks
        )

    def largest_attention_score(self, token_sets: tuple[str, ...]) -> float:
        """The largest |score| of a visible key (scaled, before the softmax), over every head and these token sets."""
        hooks = [f"blocks.{layer}.attn.hook_attn_scores" for layer in range(self.n_layers)]
        scores = (self.activations(name)[hook] for name in token_sets for hook in hooks)
        return max(float(s[s.isfinite()].abs().max()) for s in scores)

    def call(self, path: str, *args: torch.Tensor, overrides: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """The reference submodule at `path` applied to `args`, optionally with some parameters replaced."""
        import torch
        from transformer_lens.components import AbstractAttention

        module = self.model.get_submodule(path)
        if isinstance(module, AbstractAttention):
            args = (args[0], args[0], args[0])  # self-attention: query, key and value inputs are one
        with torch.no_grad():
            return torch.func.functional_call(module, overrides or {}, args).detach().clone()

    def causal_mask(self, scores: torch.Tensor, past_kv_pos_offset: int = 0) -> torch.Tensor:
        """transformer_lens's causal mask of attention scores whose queries follow `past_kv_pos_offset` cached keys."""
        return self.model.blocks[0].attn.apply_causal_mask(scores, past_kv_pos_offset).detach().clone()

    def call_with_hooks(
        self, path: str, *args: torch.Tensor, hooks: tuple[str, ...], overrides: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Like `call`, also returning what the named hook points inside the submodule saw."""
        module = self.model.get_submodule(path)
        seen: dict[str, torch.Tensor] = {}
        handles = [
            module.get_submodule(name).register_forward_hook(
                lambda _m, _i, out, name=name: seen.__setitem__(name, out.detach().clone())
            )
            for name in hooks
        ]
        try:
            return self.call(path, *args, overrides=overrides), seen
        finally:
            for handle in handles:
                handle.remove()

    @property
    def tokenizer(self):
        """GPT-2's tokenizer, as transformer_lens loaded it with the model."""
        return self.model.tokenizer

    @cache  # noqa: B019 (one Reference lives as long as the builder process)
    def corpus(self) -> corpus.Corpus:
        """The offline training text (the standard library's documentation) in this tokenizer's ids."""
        return corpus.build(self.tokenizer)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """GPT-2's logits on any token ids, (batch, posn) -> (batch, posn, d_vocab)."""
        import torch

        with torch.no_grad():
            return self.model(tokens).detach().clone()

    def incremental_logits(self) -> Callable[[list[int]], torch.Tensor]:
        """A function that feeds token ids to GPT-2 one call after another, the sequence growing, and returns the
        last position's logits (d_vocab,); transformer_lens's key-value cache keeps the earlier positions, so a
        greedy continuation costs one position a step, not the whole sequence again."""
        import torch
        from transformer_lens import TransformerLensKeyValueCache

        past = TransformerLensKeyValueCache.init_cache(self.model.cfg, "cpu", batch_size=1)

        def step(ids: list[int]) -> torch.Tensor:
            with torch.no_grad():
                return self.model(torch.tensor([ids]), past_kv_cache=past)[0, -1].detach().clone()

        return step

    def chunked_logits(self, tokens: torch.Tensor, chunks: list[int], slip: str) -> torch.Tensor:
        """GPT-2's logits with transformer_lens's key-value cache, `tokens` fed a chunk at a time, as a cached model
        with one classic slip computes them after its first chunk: "positions from 0" (each chunk's positions
        restart at 0) or "mask from the first key" (query i of a chunk sees keys 0 to i of the whole cache)."""
        import torch
        from transformer_lens import TransformerLensKeyValueCache

        cache = TransformerLensKeyValueCache.init_cache(self.model.cfg, "cpu", batch_size=tokens.shape[0])

        def positions_from_zero(pos_embed, hook):
            return self.model.W_pos[: pos_embed.shape[1]].expand_as(pos_embed)

        def mask_from_first_key(scores, hook):
            queries, keys = scores.shape[-2:]
            return scores.masked_fill(torch.ones(queries, keys, dtype=torch.bool).triu(1), float("-inf"))

        hooks = {
            "positions from 0": [("hook_pos_embed", positions_from_zero)],
            "mask from the first key": [(lambda name: name.endswith("attn.hook_attn_scores"), mask_from_first_key)],
        }[slip]
        logits, start = [], 0
        with torch.no_grad():
            for index, size in enumerate(chunks):
                chunk = tokens[:, start : start + size]
                hooked = hooks if index else []  # the first chunk has no cache: no slip shows there
                logits.append(self.model.run_with_hooks(chunk, past_kv_cache=cache, fwd_hooks=hooked))
                start += size
        return torch.cat(logits, dim=1).detach().clone()

    def logit_lens(self, tokens: torch.Tensor) -> torch.Tensor:
        """ln_final (statistics recomputed per stream) and the unembedding applied to the residual
        stream before each block and after the last: (n_layers + 1, batch, posn, d_vocab)."""
        import torch

        with torch.no_grad():
            _, activation_cache = self.model.run_with_cache(tokens)
            streams = activation_cache.accumulated_resid(apply_ln=True)
            return torch.stack([self.model.unembed(stream) for stream in streams]).detach().clone()

    def head_circuits(self, layer: int, head: int) -> dict[str, torch.Tensor]:
        """One head's QK (W_Q W_K^T) and OV (W_V W_O) circuits, (d_model, d_model), from FactoredMatrix."""
        attn = self.model.blocks[layer].attn
        return {"qk": attn.QK[head].AB.detach().clone(), "ov": attn.OV[head].AB.detach().clone()}

    # --- Part 5: induction heads, on this model or on the small trained one ---------------------------------------

    @cache  # noqa: B019 (one Reference lives as long as the builder process)
    def induction_model(self) -> Reference:
        """The small trained model with a previous-token head and induction heads (grader/builder/induction_model.py),
        from its shipped weights, behind this same interface; its sequences begin with end-of-text, in its
        vocabulary (the corpus's ids, by frequency), as GPT-2's do."""
        from grader.builder import induction_model

        end_of_text = int((self.corpus().gpt2_ids == self.tokenizer.eos_token_id).nonzero()[0, 0])
        assert end_of_text < induction_model.D_VOCAB, "end-of-text is among the small model's tokens"
        return Reference(induction_model.load(), "induction-2l", self.seed, bos=end_of_text)

    def run_with_cache(self, tokens: torch.Tensor, names: tuple[str, ...]) -> tuple[torch.Tensor, ActivationCache]:
        """The logits and transformer_lens's ActivationCache of the hooks `names` on any token ids."""
        import torch

        with torch.no_grad():
            return self.model.run_with_cache(tokens, names_filter=lambda name: name in names)

    @cache  # noqa: B019 (one Reference lives as long as the builder process)
    def mean_patterns(self, tokens_name: str) -> torch.Tensor:
        """Every head's attention pattern on one of `self.tokens`, averaged over the batch: (n_layers, n_heads,
        query, key)."""
        import torch

        names = tuple(f"blocks.{layer}.attn.hook_pattern" for layer in range(self.n_layers))
        _, activation_cache = self.run_with_cache(self.tokens[tokens_name], names)
        return torch.stack([activation_cache[name].mean(dim=0) for name in names]).detach().clone()

    def logits_with_hook(self, tokens: torch.Tensor, hook: str, edit) -> torch.Tensor:
        """The logits with the activation at the hook point `hook` replaced by `edit(activation)`."""
        import torch

        with torch.no_grad():
            logits = self.model.run_with_hooks(tokens, fwd_hooks=[(hook, lambda activation, hook: edit(activation))])
        return logits.detach().clone()

    def head_results(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """What each head writes into the residual stream, (batch, posn, n_layers, n_heads, d_model), as
        "results" (from hook_z and W_O), and as ln_final sees it, centred and divided by its scale
        (`apply_ln_to_stack`), as "normalised"; "scale" is ln_final's scale, (batch, posn, 1)."""
        import einops

        names = (*(f"blocks.{layer}.attn.hook_z" for layer in range(self.n_layers)), "ln_final.hook_scale")
        _, activation_cache = self.run_with_cache(tokens, names)
        stack = activation_cache.stack_head_results(layer=-1)  # (layer head, batch, posn, d_model)
        normalised = activation_cache.apply_ln_to_stack(stack, layer=-1)
        as_heads = "(layer head) batch posn d_model -> batch posn layer head d_model"
        return {
            "results": einops.rearrange(stack, as_heads, layer=self.n_layers).detach().clone(),
            "normalised": einops.rearrange(normalised, as_heads, layer=self.n_layers).detach().clone(),
            "scale": activation_cache["ln_final.hook_scale"].detach().clone(),
        }

    def k_composition_score(self, earlier: tuple[int, int], later: tuple[int, int]) -> torch.Tensor:
        """How much the head `earlier` (layer, head) writes into the keys of the head `later`, as transformer_lens's
        `all_composition_scores("K")` scores it (computed for this one pair: all of GPT-2's take minutes)."""
        from transformer_lens.utils import composition_scores

        (l0, h0), (l1, h1) = earlier, later
        ov, qk = self.model.blocks[l0].attn.OV[h0], self.model.blocks[l1].attn.QK[h1]
        return composition_scores(ov, qk.T).detach().clone()

    def gelu_new(self, x: torch.Tensor) -> torch.Tensor:
        from transformer_lens.utils import gelu_new

        return gelu_new(x)

    def parameters_of(self, path: str) -> dict[str, torch.Tensor]:
        """The parameters of the submodule at `path`, by their names inside it."""
        return {name: param.detach().clone() for name, param in self.model.get_submodule(path).named_parameters()}

    def weight(self, name: str) -> torch.Tensor:
        """One parameter by its full name, not copied: for reading only (the whole model's are large)."""
        return self.model.get_parameter(name).detach()

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(param.shape) for name, param in self.model.named_parameters()}

    def config_fields(self) -> dict[str, int]:
        """This model's shape as the fields of the course's Config (a learner's modules are built at them)."""
        fields = ("d_model", "n_heads", "d_head", "d_mlp", "n_layers", "n_ctx", "d_vocab")
        return {name: int(getattr(self.model.cfg, name)) for name in fields}


def load(kind: str, seed: int = DEFAULT_INPUT_SEED) -> Reference:
    """Load GPT-2 with every weight processing off, so parameters and activations are GPT-2's own."""
    import torch
    from transformer_lens import HookedTransformer

    model = HookedTransformer.from_pretrained_no_processing(MODEL_NAME, device="cpu")
    model.eval()
    # transformer_lens's Unembed copies W_U transposed at every call (154 MB); W_U held as the transpose of a
    # contiguous matrix makes that copy free: the same values, in the layout of Hugging Face's lm_head.
    model.unembed.W_U = torch.nn.Parameter(model.unembed.W_U.detach().T.contiguous().T)
    if kind == "random":
        # GPT-2 has no unembedding bias, so the loader sets b_U to zeros; make it non-trivial too.
        with torch.no_grad():
            model.unembed.b_U.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(MODEL_SEED))
    return Reference(model, kind, seed)


# --- the cache entry ----------------------------------------------------------------------------


def write_entry(ref: Reference, out: Path, progress) -> None:
    """weights.safetensors and inputs/<check>.safetensors (what the learner may see), expected.safetensors
    and meta.json (the cases, and a digest of every other file)."""
    from safetensors.torch import save_file

    from grader.checks import registry
    from grader.shared import wire
    from grader.shared.entry import entry_digests

    expected, cases_meta = {}, {}
    checks = registry()
    (out / "inputs").mkdir()
    for number, check in enumerate(checks):
        progress(f"computing GPT-2's outputs for {check.id}", 0.3 + 0.6 * number / len(checks))
        if number and check.part != checks[number - 1].part:
            ref.activations.cache_clear()  # a part's activations (hundreds of MB for the long cases) go with it
        inputs, cases_meta[check.id] = {}, []
        for case in check.cases(ref):
            for i, arg in enumerate(case.args):
                inputs[wire.ARG.format(case=case.name, i=i)] = arg
            for param, value in case.overrides.items():
                inputs[wire.OVERRIDE.format(case=case.name, parameter=param)] = value
            for name, value in case.extra.items():
                inputs[wire.EXTRA.format(case=case.name, name=name)] = value
            answers = {case.name: case.expected}
            answers |= {wire.STEP.format(case=case.name, label=label): value for label, value in case.steps.items()}
            answers |= {
                wire.MISTAKE.format(case=case.name, i=i): value for i, value in enumerate(case.mistakes.values())
            }
            expected |= {wire.EXPECTED.format(check=check.id, case=name): value for name, value in answers.items()}
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
            cases_meta[check.id].append(asdict(spec))
        save_file(contiguous(inputs), str(out / "inputs" / f"{check.id}.safetensors"))
    save_file(contiguous(expected), str(out / "expected.safetensors"))
    del expected  # the builder's peak memory: the model, and one file's tensors at a time
    progress("writing the reference weights", 0.9)
    parameters = contiguous({name: param.detach() for name, param in ref.model.named_parameters()})
    save_file(parameters, str(out / "weights.safetensors"))
    vocabulary = [
        ref.tokenizer.decode([token]) for token in range(ref.d_vocab)
    ]  # for the figures: no tokenizer at grading
    (out / "vocabulary.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    meta = {
        "reference": ref.kind,
        "seed": ref.seed,
        "param_counts": counts_by_part((name, tensor.numel()) for name, tensor in parameters.items()),
        "cases": cases_meta,
        "prompt_tokens": ref.tokens["prompt"][0].tolist(),
        "small_model": small_model_facts(ref),
        "digests": entry_digests(out),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def small_model_facts(ref: Reference) -> dict:
    """For the figures of the small induction model: the text of each of its token ids (the corpus's ids, by
    frequency, in the tokenizer's words), and the logit lens's case on it with its tokens."""
    from grader.checks.interp import SMALL_LENS

    small = ref.induction_model()
    gpt2_ids = ref.corpus().gpt2_ids[: small.d_vocab].tolist()
    lens_tokens = small.tokens[SMALL_LENS][0].tolist() if SMALL_LENS in small.tokens else []
    vocabulary = [ref.tokenizer.decode([token]) for token in gpt2_ids]
    return {"vocabulary": vocabulary, "lens_case": SMALL_LENS, "lens_tokens": lens_tokens}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build one reference cache entry (run by the grader).")
    parser.add_argument("--kind", choices=("gpt2", "random"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--offline", action="store_true", help="use only the local Hugging Face cache")
    parser.add_argument("--random-hub", type=Path, help="where the random model's Hugging Face cache lives")
    parser.add_argument("--seed", type=int, default=DEFAULT_INPUT_SEED, help="seed of the random inputs")
    args = parser.parse_args(argv)

    def progress(message: str, fraction: float) -> None:
        print(f"{PROGRESS_PREFIX}{fraction:.3f} {message}", file=sys.stderr, flush=True)

    # Both are read when huggingface_hub is first imported, which happens only below.
    if args.kind == "random":
        os.environ["HF_HUB_CACHE"] = str(args.random_hub)
    if args.offline or args.kind == "random":
        os.environ["HF_HUB_OFFLINE"] = "1"
    if args.kind == "random" and not random_hub_is_complete(args.random_hub):
        progress("writing a seeded random GPT-2 small as a local model cache", 0.0)
        write_random_hub(args.random_hub)
    progress(f"loading {args.kind} with transformer_lens", 0.1)
    with collection_paused():  # transformer_lens's import, the model's modules: all alive to the end
        ref = load(args.kind, args.seed)
    write_entry(ref, args.out, progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
