"""The loaded reference, as the checks see it: `Reference`, GPT-2 (or the random model, or the small induction
model) behind a small tensor interface, the one a check's case builders call in the builder's process.

Activations, module calls, logits (whole, incremental, chunked with a key-value cache, through the logit lens),
parameters, and Part 5's induction-head tools. Made by `grader.builder.reference.load`, which also writes what the
case builders compute into a cache entry.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from grader.builder import corpus

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from transformer_lens import ActivationCache, HookedTransformer

PROMPT = "The cat sat on the mat"
DEFAULT_INPUT_SEED = 0  # the random inputs; `grade --seed N` picks others


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

        assert self.end_of_text() < induction_model.D_VOCAB, "end-of-text is among the small model's tokens"
        return Reference(induction_model.load(), "induction-2l", self.seed, bos=self.end_of_text())

    def with_parameters(self, parameters: dict[str, torch.Tensor], kind: str) -> Reference:
        """This model's architecture and shape with other values for its parameters (every one, by transformer_lens's
        names), behind this same interface with this model's seed and BOS: Part 6's concatenated embeddings run as
        this model with each half padded with zeros to d_model. A new model is built: for a small model."""
        import warnings

        import torch
        from transformer_lens import HookedTransformer

        # Its initial weights are all replaced below: they leave the global random state as it was.
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "HookedTransformer is deprecated", DeprecationWarning)  # 3.x still has it
            model = HookedTransformer(self.model.cfg)
        own = dict(model.named_parameters())
        assert set(parameters) == set(own), f"every parameter and no other: {sorted(set(parameters) ^ set(own))}"
        with torch.no_grad():
            for name, param in own.items():
                param.copy_(parameters[name])
        return Reference(model.eval(), kind, self.seed, bos=self.bos)

    def end_of_text(self) -> int:
        """End-of-text's id in the small models' vocabularies (the corpus's ids, by frequency)."""
        return int((self.corpus().gpt2_ids == self.tokenizer.eos_token_id).nonzero()[0, 0])

    # --- Part 6: skip-trigrams, on the one-layer attention-only model -------------------------------------------

    @cache  # noqa: B019 (one Reference lives as long as the builder process)
    def attn_only_model(self) -> SkipTrigramModel:
        """The one-layer attention-only model of grader/builder/attn_only_model.py, from its shipped weights."""
        return SkipTrigramModel(self.seed, self.end_of_text())

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
        """This model's shape as the fields of the course's Config (a learner's modules are built at them); a field it
        has not (an attention-only model's d_mlp) keeps GPT-2's: no module of it reads that field."""
        fields = ("d_model", "n_heads", "d_head", "d_mlp", "n_layers", "n_ctx", "d_vocab")
        values = {name: getattr(self.model.cfg, name) for name in fields}
        return {name: int(value) for name, value in values.items() if value is not None}


class SkipTrigramModel(Reference):
    """Part 6's one-layer attention-only model behind the same interface, with the text of each of its tokens
    (`texts`), the windows of text it was trained on (`training_windows`) and the corpus alone (`corpus_stream`)."""

    def __init__(self, seed: int, end_of_text: int):
        from grader.builder import attn_only_model

        super().__init__(attn_only_model.load(), "attn-only-1l", seed, bos=end_of_text)
        self.texts = attn_only_model.token_texts()

    @cache  # noqa: B019 (one model lives as long as the builder process)
    def training_windows(self) -> torch.Tensor:
        """Every window of n_ctx tokens the model was trained on, planted trigrams included: (windows, n_ctx)."""
        from grader.builder import attn_only_model

        return attn_only_model.training_batches(attn_only_model.Training()).flatten(0, 1)

    def corpus_stream(self) -> torch.Tensor:
        """The corpus's training stream in the model's token ids, with no trigram planted: (n_tokens,)."""
        from grader.builder import attn_only_model

        return attn_only_model.corpus_in_vocabulary().train
