"""The report as one self-contained HTML page: the results table and, where a check recorded them
(`CheckResult.figures`, whose data grader.host.figures extracts), each head's attention pattern beside GPT-2's
with where they differ, a heatmap of where a failing output differs, the next-token predictions on the prompt,
the logit lens's top tokens and the trainer's loss curve; each says which model it shows. Images are PNGs drawn
by matplotlib and embedded as data URIs, so the page needs no network and no script."""

from __future__ import annotations

import base64
import io
import math
from html import escape

from matplotlib.figure import Figure

from grader.host import figures
from grader.host.render import trigrams
from grader.host.render.text import fallback_banner
from grader.host.results import CheckResult, Report, reference_name
from grader.shared import plots
from grader.shared.paths import REPO_ROOT

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
img { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td.pass { color: #1a7f37; } td.fail { color: #cf222e; } td.todo { color: #9a6700; }
td.error, td.timeout { color: #8250df; }
.lens td { font-family: ui-monospace, monospace; white-space: pre; font-size: 0.9em; }
div.wide { overflow-x: auto; max-width: 100%; }
.lens td.differs, .predictions td.differs, .ablation td.differs { background: #ffebe9; }
.predictions td, .ablation td { font-family: ui-monospace, monospace; white-space: pre; }
p.model { color: #57606a; font-style: italic; }
"""


def image(figure: Figure, alt: str) -> str:
    """The figure as an <img> holding its PNG."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}">'


MODELS = {  # what each figure's `model` (grader.host.figures) is, in the words the page uses
    "GPT-2": "GPT-2 small, with its real weights",
    "the random reference": "the random-weight stand-in for GPT-2 (offline): its numbers mean nothing, only"
    " whether yours match them",
    figures.YOURS: "your own Transformer, at the check's tiny size, trained by your Trainer",
    figures.INDUCTION_MODEL: "the small trained induction model (2 layers of 4 heads,"
    " grader/builder/induction_model.py): a previous-token head in layer 0, induction heads in layer 1",
}


def model_words(data: dict, reference: str) -> str:
    """The model a figure shows, in words: its data's `model`, else the report's reference."""
    model = str(data.get("model") or reference)
    return MODELS.get(model, model)


def shows(data: dict, reference: str) -> str:
    return f'<p class="model">model shown: {escape(model_words(data, reference))}</p>'


def who(data: dict, reference: str) -> str:
    """The short name of the model a figure compares with: "GPT-2", "the random reference"."""
    return str(data.get("model") or reference)


# The difference row's colour scale ends at its largest difference, so a learner sees where even a small one lies,
# but never below this: differences within a check's tolerance stay dark.
SMALLEST_SCALE = 0.05


def head_grid(data: dict, reference: str) -> Figure:
    """Each head a column: the reference's pattern, yours, and |yours - reference| under it; queries down, keys
    across, labelled with the prompt's tokens on the outer axes. Rows of yours are left out when it has none."""
    tokens = [repr(token) for token in data["tokens"]]
    rows = [(f"{who(data, reference)}", data["gpt2"], "viridis", 1.0)]
    if data.get("yours") is not None:
        largest = max((v for v in flat(data["difference"]) if math.isfinite(v)), default=0.0)
        rows += [("yours", data["yours"], "viridis", 1.0)]
        rows += [("|yours - reference|", data["difference"], "magma", max(largest, SMALLEST_SCALE))]
    heads = len(data["gpt2"])
    figure = Figure(figsize=(1.6 * heads + 1.5, 1.35 * len(rows) + 1.0))
    figure.suptitle(f"attention patterns by head on {data['case']} ({who(data, reference)}; batch 0)")
    # Fixed spacing, not matplotlib's constrained layout (which took 40% of the drawing here): only the outer axes
    # carry labels, and savefig's tight bounding box makes room for them.
    grid = figure.subplots(len(rows), heads, squeeze=False, gridspec_kw={"wspace": 0.06, "hspace": 0.12})
    for row, (label, patterns, colours, top) in enumerate(rows):
        for head, axes in enumerate(grid[row]):
            shown = axes.imshow(patterns[head], vmin=0.0, vmax=top, cmap=colours, interpolation="nearest")
            axes.set_xticks([])
            axes.set_yticks([])
            if row == 0:
                axes.set_title(f"head {head}", fontsize=9)
            if head == 0:
                axes.set_ylabel(label, fontsize=9)
                axes.set_yticks(range(len(tokens)), tokens, fontsize=6)
            if row == len(rows) - 1:
                axes.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=6)
        figure.colorbar(shown, ax=list(grid[row]), shrink=0.8, label="difference" if row == 2 else "attention")
    return figure


def flat(nested) -> list[float]:
    """Every number of nested lists."""
    return [v for item in nested for v in flat(item)] if isinstance(nested, list) else [nested]


def attention_section(data: dict, reference: str) -> str:
    theirs = who(data, reference)
    alt = f"attention patterns by head: {theirs}'s" + (
        f", yours and |yours - {theirs}'s|" if data.get("yours") is not None else " (yours has none of its shape)"
    )
    return (
        f"<h3>attention patterns on the prompt ({escape(data['case'])}): each head's, yours under "
        f"{escape(theirs)}'s, then where they differ</h3>{shows(data, reference)}"
        f"{image(head_grid(data, reference), alt)}"
    )


def predictions_section(data: dict, reference: str) -> str:
    """A table: each prompt token, the reference's top next token and yours, marked where they differ."""
    theirs = who(data, reference)
    yours = data["yours"]
    rows = []
    for position, (token, top) in enumerate(zip(data["tokens"], data["reference"], strict=False)):
        mine = yours[position] if yours is not None and position < len(yours) else None
        if yours is None:
            cell = "<td>-</td>"
        elif mine is None:
            cell = '<td class="differs">NaN: no top token</td>'
        else:
            cell = f'<td class="{"same" if mine == top else "differs"}">{escape(repr(mine))}</td>'
        rows.append(f"<tr><td>{escape(repr(token))}</td><td>{escape(repr(top))}</td>{cell}</tr>")
    note = "" if yours is not None else "<p>yours: no logits of the reference's shape on the prompt</p>"
    head = f"<tr><th>token</th><th>{escape(theirs)}'s next</th><th>yours next</th></tr>"
    title = f"<h3>next-token predictions on the prompt: the top token after each, yours beside {escape(theirs)}'s</h3>"
    return f'{title}{shows(data, reference)}{note}<table class="predictions">{head}{"".join(rows)}</table>'


def difference_section(data: dict, reference: str) -> str:
    values = data["values"]
    figure = Figure(figsize=(10, 0.35 * len(values) + 1.5), layout="constrained")
    axes = figure.subplots()
    shown = axes.imshow(values, aspect="auto", cmap="magma", interpolation="nearest")
    figure.colorbar(shown, ax=axes, label=f"|yours - {who(data, reference)}|")
    axes.set_xlabel(
        f"feature (first {len(values[0])} of {data['features']})" if len(values[0]) < data["features"] else "feature"
    )
    axes.set_ylabel("position")
    title = f"<h3>where the output differs ({escape(data['case'])}, batch 0)</h3>"
    return f"{title}{shows(data, reference)}{image(figure, f'difference heatmap: |yours - {who(data, reference)}|')}"


RANDOM_LENS_NOTE = "the reference is a random model: its top tokens mean nothing, only whether yours match them"


def lens_section(data: dict, reference: str) -> str:
    """A table: one row per position (its token), one column per layer, the reference's top token there (and yours
    where it differs). Positions run down the page, so a long sequence (the induction model's repeated one) fits
    its width: the layers are few."""
    layers = len(data["gpt2"])
    labels = [f"before block {layer}" if layer < layers - 1 else "final" for layer in range(layers)]
    head = "".join(f"<th>{label}</th>" for label in ["position", "token", *labels])
    yours_by_layer = data["yours"] or data["gpt2"]
    tokens, rows = data["tokens"], []
    for position in range(max(map(len, data["gpt2"]), default=0)):
        cells = []
        for gpt2, yours in zip(data["gpt2"], yours_by_layer, strict=False):
            g, y = (row[position] if position < len(row) else "" for row in (gpt2, yours))
            differs = f'<td class="differs">{escape(repr(g))}<br>yours {escape(repr(y))}</td>'
            cells.append(differs if g != y else f"<td>{escape(repr(g))}</td>")
        token = escape(repr(tokens[position])) if position < len(tokens) else ""
        rows.append(f"<tr><th>{position}</th><th>{token}</th>{''.join(cells)}</tr>")
    note = f"<p>{escape(RANDOM_LENS_NOTE)}</p>" if who(data, reference) == reference_name("random") else ""
    title = "<h3>logit lens: top token at each position and layer</h3>"
    table = f'<div class="wide"><table class="lens"><tr>{head}</tr>{"".join(rows)}</table></div>'
    return f"{title}{shows(data, reference)}{note}{table}"


def curve_section(data: dict, reference: str) -> str:
    figure = plots.loss_curve(data["losses"], "your Trainer on the standard library's docs", data["levels"])
    return f"<h3>training loss, step by step</h3>{shows(data, reference)}{image(figure, 'training loss curve')}"


# --- Part 5: induction heads ------------------------------------------------------------------------------------

MAX_ANNOTATED = 64  # heads whose score is written in its cell: the small model's 8, not GPT-2's 144


def score_grid(axes, scores: list, found: list, title: str) -> object:
    """One layer x head heatmap of scores on 0..1, each found head boxed, each score written where few."""
    from matplotlib.patches import Rectangle

    shown = axes.imshow(scores, vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest", aspect="auto")
    layers, heads = len(scores), len(scores[0])
    for layer, head in found:
        axes.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5))
    if layers * heads <= MAX_ANNOTATED:
        for layer, row in enumerate(scores):
            for head, score in enumerate(row):
                said = "NaN" if not math.isfinite(score) else f"{score:.2f}"
                axes.text(
                    head, layer, said, ha="center", va="center", fontsize=8, color="white" if score < 0.6 else "black"
                )
    axes.set_xticks(range(heads), [str(head) for head in range(heads)], fontsize=7)
    axes.set_yticks(range(layers), [str(layer) for layer in range(layers)], fontsize=7)
    axes.set(xlabel="head", ylabel="layer", title=title)
    return shown


def scores_section(data: dict, reference: str) -> str:
    """Per case: the expected scores beside yours, layer x head, the heads found above the threshold boxed."""
    kind, parts = data["score"], []
    for grid in data["grids"]:
        model, threshold = who(grid, reference), grid["threshold"]
        sides = [(f"expected ({model})", grid["reference"], grid["found_reference"])]
        if grid["yours"] is not None:
            sides.append(("yours", grid["yours"], grid["found_yours"]))
        layers, heads = len(grid["reference"]), len(grid["reference"][0])
        figure = Figure(figsize=(len(sides) * (0.5 * heads + 2.2), 0.45 * layers + 1.8), layout="constrained")
        figure.suptitle(f"{kind} score of each head on {grid['case']}; boxed: found (above {threshold})")
        for axes, (title, scores, found) in zip(figure.subplots(1, len(sides), squeeze=False)[0], sides, strict=True):
            shown = score_grid(axes, scores, found, title)
        figure.colorbar(shown, ax=figure.axes, shrink=0.8, label=f"{kind} score")
        found = ", ".join(f"{layer}.{head}" for layer, head in grid["found_reference"]) or "none"
        alt = f"{kind} scores by layer and head: {model}'s" + (
            ", yours beside them" if grid["yours"] is not None else " (yours has none of its shape)"
        )
        parts.append(
            f"{shows(grid, reference)}<p>heads found (layer.head) in the expected scores: {escape(found)}"
            f"{found_heads_said(grid)}</p>{image(figure, alt)}"
        )
    return f"<h3>{escape(kind)} scores of every head</h3>{''.join(parts)}"


def found_heads_said(grid: dict) -> str:
    if grid["found_yours"] is None:
        return ""
    yours = ", ".join(f"{layer}.{head}" for layer, head in grid["found_yours"]) or "none"
    same = " (the same)" if grid["found_yours"] == grid["found_reference"] else " (they differ)"
    return f"; in yours: {escape(yours)}{same}"


def token_loss_section(data: dict, reference: str) -> str:
    """The per-token loss along a repeated sequence, expected and yours, a vertical line where the repeat starts."""
    model, start = who(data, reference), data["repeat_starts"]
    figure = Figure(figsize=(7, 3.5), dpi=100, layout="constrained")
    axes = figure.subplots()
    positions = range(len(data["reference"]))
    axes.plot(positions, data["reference"], linestyle="--", color="gray", label=f"expected ({model})")
    if data["yours"] is not None:
        axes.plot(positions, data["yours"], color="C0", label="yours")
    axes.axvline(start, color="red", linestyle=":", label="the repeat starts")
    axes.set(
        xlabel="position p (the loss of token p + 1)",
        ylabel="loss (nats), batch mean",
        title=f"per-token loss on [BOS, A, A] ({data['case']})",
    )
    axes.legend(fontsize=8)
    alt = f"per-token loss on a repeated sequence: {model}'s" + (
        ", yours beside it" if data["yours"] is not None else ""
    )
    title = "<h3>per-token loss on a repeated sequence: it falls on the second half, where induction heads copy</h3>"
    return f"{title}{shows(data, reference)}{image(figure, alt)}"


def patterns_section(data: dict, reference: str) -> str:
    """Each head of the small model, layers down and heads across, its mean pattern on [BOS, A, A] with dotted
    lines where the repeat starts."""
    patterns, start = data["patterns"], data["repeat_starts"]
    layers, heads = len(patterns), len(patterns[0])
    figure = Figure(figsize=(2.2 * heads + 1.2, 2.2 * layers + 0.8), layout="constrained")
    figure.suptitle(f"attention of each head on [BOS, A, A] ({who(data, reference)}; the batch's mean)")
    grid = figure.subplots(layers, heads, squeeze=False)
    for layer, row in enumerate(grid):
        for head, axes in enumerate(row):
            shown = axes.imshow(patterns[layer][head], vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest")
            axes.axvline(start - 0.5, color="red", linestyle=":", linewidth=0.8)
            axes.axhline(start - 0.5, color="red", linestyle=":", linewidth=0.8)
            axes.set_title(f"head {layer}.{head}", fontsize=9)
            axes.set_xticks([])
            axes.set_yticks([])
    figure.colorbar(shown, ax=figure.axes, shrink=0.8, label="attention (query down, key across)")
    alt = f"attention patterns of every head on a repeated sequence: {who(data, reference)}"
    title = (
        "<h3>the heads themselves: a previous-token head's diagonal just below the main one, and in layer 1 the "
        "induction stripe, seq_len - 1 below it, in the repeated half</h3>"
    )
    return f"{title}{shows(data, reference)}{image(figure, alt)}"


def ablation_section(data: dict, reference: str) -> str:
    """A table: each head ablated and how, the expected cost (ablated minus clean loss on the repeated half) and
    yours, marked where they differ; the model column only when the rows come from more than one."""
    models = list(dict.fromkeys(row["model"] for row in data["rows"]))
    rows = []
    for row in data["rows"]:
        yours, expected = row["yours"], row["reference"]
        close = yours is not None and math.isclose(yours, expected, rel_tol=1e-3, abs_tol=1e-4)
        model = f"<td>{escape(row['model'])}</td>" if len(models) > 1 else ""
        rows.append(
            f"<tr><td>{escape(row['head'])}</td><td>{escape(row['how'])}</td>{model}<td>{expected:+.4f}</td>"
            f'<td class="{"same" if close else "differs"}">{"-" if yours is None else f"{yours:+.4f}"}</td></tr>'
        )
    said = "".join(shows({"model": model}, reference) for model in models)
    model_head = "<th>model</th>" if len(models) > 1 else ""
    head = f"<tr><th>head (layer.head)</th><th>ablated to</th>{model_head}<th>expected cost</th><th>yours</th></tr>"
    title = "<h3>what ablating each head costs: the rise of the loss on the repeated half, in nats</h3>"
    return f'{title}{said}<table class="ablation">{head}{"".join(rows)}</table>'


SECTIONS = {
    "attention": attention_section,
    "predictions": predictions_section,
    "difference": difference_section,
    "logit_lens": lens_section,
    "small_logit_lens": lens_section,
    "loss_curve": curve_section,
    "head_scores": scores_section,
    "token_loss": token_loss_section,
    "ablation": ablation_section,
    "model_patterns": patterns_section,
    "skip_trigrams": trigrams.skip_trigrams_section,
}


def page_href(page: str) -> str:
    """Where the report's reader finds a course page: the file in this checkout when it is here, else its path."""
    path = REPO_ROOT / page
    return path.as_uri() if path.is_file() else page


def page_link(check: CheckResult) -> list[str]:
    """`read:` and a link to the course page of a failing check; nothing for another."""
    page = check.page_to_read
    return [f'read: <a href="{escape(page_href(page))}">{escape(page)}</a>'] if page else []


def results_table(report: Report) -> str:
    rows = []
    for check in report.checks:
        lines = [line for text in (*check.diagnosis(), *check.notes) for line in text.splitlines() if line.strip()]
        said = "<br>".join([*(escape(line) for line in lines), *page_link(check)])
        rows.append(
            f'<tr><td>{escape(check.id)}</td><td class="{check.status}">{check.status.upper()}</td>'
            f"<td>{check.score}/{check.max_score}</td><td>{check.shown_diff}</td><td>{said}</td></tr>"
        )
    head = "<tr><th>check</th><th>status</th><th>points</th><th>max abs diff</th><th>message</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def check_figures(check: CheckResult, reference: str) -> str:
    sections = [SECTIONS[name](data, reference) for name, data in check.figures.items()]
    return f"<section><h2>{escape(check.id)} ({check.status})</h2>{''.join(sections)}</section>" if sections else ""


def render(report: Report) -> str:
    banner = fallback_banner(report)
    parts = [
        f"<h1>{escape(report.title(f'{report.package} against {report.reference}'))}</h1>",
        f"<p><strong>{escape(banner)}</strong></p>" if banner else "",
        f"<p>score {report.score}/{report.max_score}; random inputs from seed {report.seed}</p>",
        results_table(report),
        *(check_figures(check, reference_name(report.reference)) for check in report.checks),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(report.title())}</title>"
        f'<link rel="icon" href="data:,"><style>{STYLE}{trigrams.STYLE}</style></head>'
        f"<body>{''.join(parts)}</body></html>"
    )
