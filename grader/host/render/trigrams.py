"""The HTML report's skip-trigram tables (grader.host.figures.skip_trigram_tables): for each head of the one-layer
attention-only model, each strong source as a small table, its destinations down the side and its outputs across,
every cell's score and count, the real trigrams and the bugs marked, and where the learner's bugs differ."""

from __future__ import annotations

from html import escape

STYLE = """
table.trigrams td, table.trigrams th { font-family: ui-monospace, monospace; white-space: pre; font-size: 0.85em; }
table.trigrams td.real { font-weight: bold; background: #dafbe1; }
table.trigrams td.bug { background: #ffebe9; outline: 2px solid #cf222e; }
table.trigrams td.differs { text-decoration: underline wavy #8250df; }
div.trigrams { display: flex; flex-wrap: wrap; gap: 0 1.5em; align-items: flex-start; }
"""
MODEL = (
    "the one-layer attention-only model (4 heads, no MLP, no LayerNorm; grader/builder/attn_only_model.py), "
    "trained with four families of skip-trigrams written into its text"
)
LEGEND = (
    "Each cell: the score attention[d, s] x centred OV[s, o], then how often the training windows hold "
    "s ... d -> o. Green: real (at least {min_real} times). Red: a bug, not real though its row and its column "
    "each hold a real one. {yours}"
)


def cell(source: dict, a: int, b: int) -> str:
    """One (destination a, output b) cell: its classes, score and count, and the learner's word where it differs."""
    bug, yours = source["bugs"][a][b], source["yours"]
    differs = yours is not None and yours[a][b] != bug
    classes = ["real"] * source["real"][a][b] + ["bug"] * bug + ["differs"] * differs
    attribute = f' class="{" ".join(classes)}"' if classes else ""
    said = f"<br>yours: {'bug' if yours[a][b] else 'no bug'}" if differs else ""
    return f"<td{attribute}>{source['scores'][a][b]:.3f}<br>{source['counts'][a][b]}x{said}</td>"


def source_table(source: dict) -> str:
    outputs = "".join(f"<th>-&gt; {escape(repr(o))}</th>" for o in source["outputs"])
    head = f"<tr><th>{escape(repr(source['source']))} ... d</th>{outputs}</tr>"
    rows = [
        f"<tr><th>{escape(repr(d))}</th>{''.join(cell(source, a, b) for b in range(len(source['outputs'])))}</tr>"
        for a, d in enumerate(source["destinations"])
    ]
    return f'<table class="trigrams">{head}{"".join(rows)}</table>'


def yours_said(sources: list[dict]) -> str:
    """What the tables show of the learner's bugs."""
    if not sources or sources[0]["yours"] is None:
        return "Your skip_trigram_bugs sent back nothing of this shape to compare."
    cells = [
        (s["yours"][a][b], s["bugs"][a][b])
        for s in sources
        for a in range(len(s["bugs"]))
        for b in range(len(s["bugs"][a]))
    ]
    disagree = sum(mine != theirs for mine, theirs in cells)
    if not disagree:
        return "Your skip_trigram_bugs agrees on every cell."
    return f"Underlined, with your answer: the {disagree} cells where your skip_trigram_bugs says otherwise."


def skip_trigrams_section(data: dict, reference: str) -> str:
    """Every head's tables, sources in order of strength; where the learner's bugs differ, marked."""
    parts = ["<h3>skip-trigram tables: each source s, its destinations d (rows) and outputs o (columns)</h3>"]
    parts.append(f'<p class="model">model shown: {escape(MODEL)}</p>')
    for head in data["heads"]:
        legend = LEGEND.format(min_real=head["min_real"], yours=yours_said(head["sources"]))
        parts.append(f"<h4>{escape(head['case'])}</h4><p>{escape(legend)}</p>")
        parts.append('<div class="trigrams">' + "".join(source_table(source) for source in head["sources"]) + "</div>")
    return "".join(parts)
