"""`grade --device`: cpu and auto give today's verdicts (on a machine without a GPU auto is cpu),
a device torch does not find is named, and code that builds a tensor on a device of its own is
told so, in words a learner can act on, instead of torch's."""

from __future__ import annotations

import html
import json

import pytest
from repo import SOLUTIONS, by_id, run_grade, write_variant
from verdicts import NAMES, expected_statuses, verdicts

MASK_DEVICE = "device=attn_scores.device"
MIXUP = "your code created a tensor on meta while the inputs are on cpu: create it on the input's device"
HARD_CODED = {
    "a literal device": {"attention.py": [(MASK_DEVICE, 'device="meta"')]},
    "a module-level DEVICE": {
        "attention.py": [
            (
                "from .config import Config, normal_weight\n",
                'from .config import Config, normal_weight\n\nDEVICE = torch.device("meta")\n',
            ),
            (MASK_DEVICE, "device=DEVICE"),
        ]
    },
}


def torch_finds(device: str) -> bool:
    import torch

    return torch.cuda.is_available() if device == "cuda" else torch.backends.mps.is_available()


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_cpu_and_auto_give_the_same_verdicts(name, grade, tmp_path_factory):
    if torch_finds("cuda") or torch_finds("mps"):
        pytest.skip("auto is not cpu here")
    cpu = verdicts(grade, tmp_path_factory, name, device="cpu")
    assert verdicts(grade, tmp_path_factory, name, device="auto") == cpu
    assert cpu and expected_statuses(name, cpu)


@pytest.mark.portable
@pytest.mark.parametrize(
    "variant", [pytest.param(name, marks=() if name == "a literal device" else pytest.mark.slow) for name in HARD_CODED]
)
@pytest.mark.parametrize(
    "fork", [None, pytest.param(False, marks=pytest.mark.slow)], ids=["default path", "unforked"]
)  # make test grades the literal device forked; make test-all every pair, and ci.yml every pair on macOS and Windows
def test_a_hard_coded_device_gets_the_device_message(variant, fork, grade, tmp_path):
    results = by_id(grade(write_variant(tmp_path, HARD_CODED[variant]), "attention", fork=fork))
    mask = results["attention.causal_mask"]
    assert mask.status == "error" and MIXUP in mask.message, mask.message
    assert "Tensor on device" not in mask.message and mask.file == "attention.py"
    # The mistake is the mask's: attention, graded on the grader's mask, passes and says so (one mistake, one penalty).
    attention = results["attention"]
    assert attention.status == "pass", attention.message
    assert "graded with the grader's Attention.apply_causal_mask in place of yours" in attention.notes[0]


@pytest.mark.portable
@pytest.mark.slow  # a worker each; make test grades the literal device above, ci.yml these on macOS and Windows
@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_a_device_torch_does_not_find_is_named(device, grade):
    if torch_finds(device):
        pytest.skip(f"this machine has {device}")
    result = by_id(grade(SOLUTIONS, "embed", device=device))["embed"]
    assert result.status == "error" and f"--device {device}: this machine's torch" in result.message
    assert f"finds no {device} device" in result.message


def test_the_device_message_names_what_torch_named():
    """torch's two wordings: cuda's kernels, and the device checks of meta and mps tensors."""
    import torch

    from grader.learner.device import device_mixup

    cuda = RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    )
    assert device_mixup(cuda, torch.device("cuda", 0)).startswith(
        "your code created a tensor on cpu while the inputs are on cuda:0"
    )
    assert device_mixup(cuda, torch.device("cpu")).startswith(
        "your code created a tensor on cuda:0 while the inputs are on cpu"
    )
    meta = RuntimeError("Tensor on device meta is not on the expected device cpu!")
    assert device_mixup(meta, torch.device("cpu")).startswith("your code created a tensor on meta while")
    assert device_mixup(RuntimeError("shape mismatch"), torch.device("cpu")) is None
    assert device_mixup(ValueError(str(cuda)), torch.device("cpu")) is None


SIMULATED = {"GPT2_GRADER_SIMULATED_FAULTY_DEVICE": "1", "GITHUB_ACTIONS": "false"}
DEVICE = "a simulated faulty cuda (the CPU, every floating-point result off by 0.001)"
DEVICE_FAULT = f"{DEVICE} computes LayerNorm wrongly"
UNPROBED = f"fails on {DEVICE} and passes on the CPU, where it was graded: this device computes it differently"


def test_a_device_that_computes_wrongly_is_blamed_and_the_check_graded_on_the_cpu(reference, tmp_path):
    """On a simulated faulty device the grader's own LayerNorm misses GPT-2's output too: the device is named, the
    check is graded on the CPU (the solution passes, the N-1 variance is still named), in every format. A check the
    grader has no function of its own for (erase_direction) fails there, passes on the CPU, and says so."""
    wrong = write_variant(tmp_path, {"normalization.py": [("unbiased=False", "unbiased=True")]}, base=SOLUTIONS)
    for package, status in ((SOLUTIONS, "pass"), (wrong, "fail")):
        out = tmp_path / status
        out.mkdir()
        result = run_grade(
            *(
                "--reference",
                "random",
                "--exercises",
                str(package),
                "--device",
                "cuda",
                "layernorm",
                "interp.erase_direction",
            ),
            *("--json", str(out / "report.json"), "--html", str(out / "report.html")),
            env=SIMULATED,
        )
        assert DEVICE_FAULT in " ".join(result.stdout.split()), result.stdout + result.stderr
        report = json.loads((out / "report.json").read_text())
        checks = {check["id"]: check for check in report["checks"]}
        assert checks["layernorm"]["status"] == status and checks["interp.erase_direction"]["status"] == "pass"
        assert any(DEVICE_FAULT in note for note in checks["layernorm"]["notes"])
        assert checks["interp.erase_direction"]["notes"] == [UNPROBED]
        assert DEVICE_FAULT in html.unescape((out / "report.html").read_text())
    assert "the variance divides by N-1" in checks["layernorm"]["mistake"]
    summary = tmp_path / "summary.md"
    result = run_grade(
        *("--reference", "random", "--exercises", str(wrong), "--device", "cuda", "layernorm", "--github"),
        env=SIMULATED | {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    [annotation] = [line for line in result.stdout.splitlines() if line.startswith("::error")]
    assert DEVICE_FAULT in annotation and DEVICE_FAULT in summary.read_text().replace("\\", "")  # Markdown-escaped
