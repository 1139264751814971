"""Tokens per second of greedy generation: the solution's sampler without and with the KV cache,
beside transformers' `generate`, all on the same GPT-2 small weights.

    .venv/bin/python bench/sampling_speed.py [--repeats 3] [--tokens 1 32 256]

The weights are the grader's reference (GPT-2 when it is cached, else the seeded random model,
built offline if needed) with b_U set to zero, since GPT-2's unembedding has no bias; the three
generators must then produce the same tokens, which the script checks before timing. Each figure
is new tokens divided by the median wall time of whole generations (prompt included).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.builder.interface import PROMPT  # noqa: E402
from grader.builder.reference import offline_tokenizer, random_config, random_gpt2  # noqa: E402
from grader.host.refcache import ensure_reference  # noqa: E402
from solutions.config import Config  # noqa: E402
from solutions.kv_cache import CachedTransformer, CachedTransformerSampler  # noqa: E402
from solutions.sampling import TransformerSampler  # noqa: E402
from solutions.transformer import Transformer  # noqa: E402


def solution_model(cls, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    model = cls(Config())
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all(name.endswith("IGNORE") for name in missing), (missing, unexpected)
    return model.eval()


def transformers_model(kind: str):
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained("gpt2") if kind == "gpt2" else random_gpt2(random_config())
    return model.eval()


def median_seconds(generate, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        generate()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 32, 256])
    args = parser.parse_args()

    from safetensors.torch import load_file

    reference = ensure_reference("auto", lambda message, *_: print(message, file=sys.stderr))
    weights = load_file(str(reference.weights_path))
    weights["unembed.b_U"] = torch.zeros_like(weights["unembed.b_U"])
    tokenizer = offline_tokenizer()
    samplers = {
        "solution, no cache": TransformerSampler(solution_model(Transformer, weights), tokenizer),
        "solution, KV cache": CachedTransformerSampler(solution_model(CachedTransformer, weights), tokenizer),
    }
    hf_model = transformers_model(reference.kind)
    prompt_ids = tokenizer(PROMPT, return_tensors="pt")

    def hf_generate(n: int) -> str:
        with torch.inference_mode():
            out = hf_model.generate(
                **prompt_ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=tokenizer.eos_token_id
            )
        return tokenizer.decode(out[0])

    generators = {
        name: (lambda n, s=sampler: s.sample(PROMPT, n, temperature=0.0)) for name, sampler in samplers.items()
    }
    generators["transformers generate"] = hf_generate
    texts = {name: generate(32) for name, generate in generators.items()}
    assert len(set(texts.values())) == 1, texts  # the same weights give the same greedy text

    print(
        f"{reference.kind} weights; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{platform.processor() or platform.machine()}"
    )
    print(f"{'new tokens':>10} | " + " | ".join(f"{name:>22}" for name in generators))
    for n in args.tokens:
        rates = [
            n / median_seconds(lambda generate=generate, n=n: generate(n), args.repeats)
            for generate in generators.values()
        ]
        print(f"{n:>10} | " + " | ".join(f"{rate:>16.1f} tok/s" for rate in rates))


if __name__ == "__main__":
    main()
