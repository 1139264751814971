"""The report as one self-contained HTML page: the results table and, where a check recorded them
(`CheckResult.figures`), attention patterns beside GPT-2's, a heatmap of where a failing output
differs, the logit lens's top tokens and the trainer's loss curve. Images are PNGs drawn by
matplotlib and embedded as data URIs, so the page needs no network and no script."""

from __future__ import annotations

import base64
import io
import math
from html import escape

from matplotlib.figure import Figure

from grader.host.render.text import fallback_banner
from grader.host.results import CheckResult, Report, reference_name
from grader.shared import plots
from grader.shared.paths import REPO_ROOT

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td.pass { color: #1a7f37; } td.fail { color: #cf222e; } td.todo { color: #9a6700; }
td.error, td.timeout { color: #8250df; }
.pair { display: flex; flex-wrap: wrap; gap: 1em; }
.lens td { font-family: ui-monospace, monospace; white-space: pre; }
.lens td.differs { background: #ffebe9; }
"""


def image(figure: Figure, alt: str) -> str:
    """The figure as an <img> holding its PNG."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}">'


def head_heatmaps(patterns: list, tokens: list[str], title: str) -> Figure:
    """One heatmap per head, queries down and keys across, labelled with the prompt's tokens."""
    columns = 4
    rows = math.ceil(len(patterns) / columns)
    figure = Figure(figsize=(3.2 * columns, 3.0 * rows), layout="constrained")
    figure.suptitle(title)
    for head, (axes, pattern) in enumerate(
        zip(figure.subplots(rows, columns, squeeze=False).flat, patterns, strict=False)
    ):
        axes.imshow(pattern, vmin=0.0, vmax=1.0, cmap="viridis")
        axes.set_title(f"head {head}", fontsize=9)
        axes.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
        axes.set_yticks(range(len(tokens)), tokens, fontsize=7)
    return figure


def attention_section(data: dict, reference: str) -> str:
    tokens = [repr(token) for token in data["tokens"]]
    sides = [(reference, data["gpt2"]), ("yours", data["yours"])]
    images = [
        image(
            head_heatmaps(patterns, tokens, f"{who}: attention patterns, {data['case']}"), f"{who} attention patterns"
        )
        for who, patterns in sides
        if patterns is not None
    ]
    return (
        f'<h3>attention patterns on the prompt ({escape(data["case"])})</h3><div class="pair">{"".join(images)}</div>'
    )


def difference_section(data: dict, reference: str) -> str:
    values = data["values"]
    figure = Figure(figsize=(10, 0.35 * len(values) + 1.5), layout="constrained")
    axes = figure.subplots()
    shown = axes.imshow(values, aspect="auto", cmap="magma", interpolation="nearest")
    figure.colorbar(shown, ax=axes, label="|yours - reference|")
    axes.set_xlabel(
        f"feature (first {len(values[0])} of {data['features']})" if len(values[0]) < data["features"] else "feature"
    )
    axes.set_ylabel("position")
    return f"<h3>where the output differs ({escape(data['case'])}, batch 0)</h3>{image(figure, 'difference heatmap')}"


RANDOM_LENS_NOTE = "the reference is a random model: its top tokens mean nothing, only whether yours match them"


def lens_section(data: dict, reference: str) -> str:
    """A table: one row per layer, one column per position, the reference's top token (and yours where it differs)."""
    head = "".join(f"<th>{escape(repr(token))}</th>" for token in data["tokens"])
    rows = []
    for layer, gpt2 in enumerate(data["gpt2"]):
        yours = data["yours"][layer] if data["yours"] else gpt2
        cells = "".join(
            f'<td class="differs">{escape(repr(g))} / yours {escape(repr(y))}</td>'
            if g != y
            else f"<td>{escape(repr(g))}</td>"
            for g, y in zip(gpt2, yours, strict=False)
        )
        label = "final" if layer == len(data["gpt2"]) - 1 else f"before block {layer}"
        rows.append(f"<tr><th>{label}</th>{cells}</tr>")
    note = f"<p>{escape(RANDOM_LENS_NOTE)}</p>" if reference != "GPT-2" else ""
    title = "<h3>logit lens: top token at each layer and position</h3>"
    return f'{title}{note}<table class="lens"><tr><th></th>{head}</tr>{"".join(rows)}</table>'


def curve_section(data: dict, reference: str) -> str:
    figure = plots.loss_curve(data["losses"], "your Trainer on the standard library's docs", data["levels"])
    return f"<h3>training loss, step by step</h3>{image(figure, 'training loss curve')}"


SECTIONS = {
    "attention": attention_section,
    "difference": difference_section,
    "logit_lens": lens_section,
    "loss_curve": curve_section,
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
        f"<h1>GPT-2 grader: {escape(report.package)} against {escape(report.reference)}</h1>",
        f"<p><strong>{escape(banner)}</strong></p>" if banner else "",
        f"<p>score {report.score}/{report.max_score}; random inputs from seed {report.seed}</p>",
        results_table(report),
        *(check_figures(check, reference_name(report.reference)) for check in report.checks),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>GPT-2 grader report</title>'
        f'<link rel="icon" href="data:,"><style>{STYLE}</style></head><body>{"".join(parts)}</body></html>'
    )
