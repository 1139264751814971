#!/usr/bin/env bash
# Gradescope runs this once, in the autograder's image: install the grader, then prepare the reference.
set -euo pipefail
root="${AUTOGRADER_ROOT:-/autograder}"
cd "$root/source" || exit 1
python3 -m pip install "torch==${TORCH_VERSION:-2.13.0}" --index-url "${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
python3 -m pip install .
# GPT-2's weights (where the image can reach huggingface.co), then the reference cache every grading reads.
python3 -m grader --download || echo "setup: GPT-2 could not be downloaded; grading against the random reference"
python3 -m grader --exercises exercises embed > /dev/null || [ "$?" -eq 1 ]
