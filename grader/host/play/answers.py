"""The parts of the playground's answer computed in the grader's process, in NumPy, alike for the learner's model and
GPT-2: the top next tokens, Part 5's scores on the typed text, the logit lens's cells, the "where" rows."""

from __future__ import annotations

import numpy as np

from grader.host.results import FAILING, CheckResult, finite_or_none, reference_name

TOP = 10


def top_tokens(logits: np.ndarray, vocabulary: list[str], k: int = TOP) -> list[dict]:
    """The k likeliest next tokens of one position's logits, with their probabilities."""
    shifted = logits.astype(np.float64) - np.max(logits)
    probabilities = np.exp(shifted) / np.exp(shifted).sum()
    best = np.argsort(-probabilities, kind="stable")[:k]
    return [{"token": vocabulary[i], "p": float(probabilities[i])} for i in best]


def previous_token_scores(patterns: np.ndarray) -> list[list[float]]:
    """Part 5's previous-token score (solutions/induction.py): each head's mean attention from p to p - 1."""
    below = np.diagonal(patterns, offset=-1, axis1=-2, axis2=-1)
    return (below.mean(-1) if below.shape[-1] else np.zeros(patterns.shape[:2])).tolist()


def induction_scores(patterns: np.ndarray, ids: list[int]) -> list[list[float]]:
    """Part 5's induction score on any text: each head's mean attention from a query to the token after an earlier
    occurrence of the query's token (on [BOS, A, A] exactly the course's stripe, seq_len - 1 below the diagonal);
    0 where no token repeats."""
    rows = [
        (query, [earlier + 1 for earlier in range(query) if ids[earlier] == ids[query]]) for query in range(len(ids))
    ]
    rows = [(query, keys) for query, keys in rows if keys]
    if not rows:
        return np.zeros(patterns.shape[:2]).tolist()
    per_query = np.stack([patterns[..., query, keys].sum(-1) for query, keys in rows], axis=-1)
    return per_query.mean(-1).tolist()


def repeats(ids: list[int]) -> bool:
    return len(set(ids)) < len(ids)


def lens_cells(top_p: np.ndarray, top_ids: np.ndarray, vocabulary: list[str]) -> list[list[dict]]:
    """[stream][position] -> the top token and its probability."""
    return [
        [{"token": vocabulary[int(i)], "p": float(p)} for p, i in zip(row_p, row_i, strict=True)]
        for row_p, row_i in zip(top_p, top_ids, strict=True)
    ]


def where_row(result: CheckResult, reference: str) -> dict:
    """One module's row: the largest difference on the text, the first step that differs, the named mistake and the
    message, in grade's words (no points)."""
    said = (
        f"matches {reference_name(reference)} on this text"
        if result.status == "pass"
        else "\n".join(result.diagnosis())
    )
    return {
        "module": result.id,
        "status": result.status,
        "max_diff": finite_or_none(result.max_abs_diff),
        "first_step": result.divergence,
        "mistake": result.hint,
        "message": said,
    }


def first_difference(results: list[CheckResult]) -> dict | None:
    """The first module, in course order, that differs from GPT-2 on the text, and its first step."""
    row = next((result for result in results if result.status in FAILING), None)
    return None if row is None else {"module": row.id, "step": row.divergence}
