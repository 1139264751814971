"""The class view as one self-contained HTML page: no network, no script, the style inline. A pass-rate bar per
check in course order, a learners x checks heatmap (in a box of its own that scrolls sideways: 52 checks are wider than
a screen, and the page itself never is), the score distribution, the named mistakes ranked with their learners and
course pages, the checks where learners stop, then every check that errored or timed out with its reason, every
learner who could not be graded and every grade in doubt. Every text of a result is escaped."""

from __future__ import annotations

from html import escape

from grader.host.results import STATUSES
from grader.host.tools.classview.tables import NAMES, headline, number
from grader.host.tools.classview.tally import ClassView

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; overflow-wrap: anywhere; }
div.wide { overflow-x: auto; max-width: 100%; }
td.count { text-align: right; }
div.bar { background: #eee; width: 14em; height: 0.9em; }
div.bar span { display: block; height: 100%; background: #1a7f37; }
table.heatmap td { font-size: 0.75em; text-align: center; }
table.heatmap td:first-child { text-align: left; }
table.heatmap th.check { writing-mode: vertical-rl; font-weight: normal; font-size: 0.8em; }
td.pass { background: #dafbe1; } td.fail { background: #ffebe9; } td.todo { background: #fff8c5; }
td.error, td.timeout { background: #fbefff; } td.none { background: #f6f8fa; color: #8c959f; }
"""


def bar(fraction: float, said: str) -> str:
    return f'<div class="bar" title="{escape(said)}"><span style="width: {fraction:.1%}"></span></div>'


def row(*cells: str) -> str:
    return f"<tr>{''.join(cells)}</tr>"


def cell(text: object) -> str:
    """A cell of `text`, escaped; a count right-aligned."""
    kind = ' class="count"' if isinstance(text, int) else ""
    return f"<td{kind}>{escape(str(text))}</td>"


def head(*names: str) -> str:
    return row(*(f"<th>{escape(name)}</th>" for name in names))


def pass_rates(view: ClassView) -> str:
    rows = []
    for check in view.checks:
        counts, rate = view.statuses[check], view.pass_rate(check)
        said = f"{counts['pass']} of {view.graded_on(check)} pass ({rate:.0%})"
        graded = cell(view.graded_on(check))
        rows.append(row(cell(check), f"<td>{bar(rate, said)}</td>", *(cell(counts[s]) for s in STATUSES), graded))
    title = "<h2>Pass rate by check, in course order</h2>"
    return f'{title}<table class="checks">{head("check", "pass rate", *STATUSES, "graded")}{"".join(rows)}</table>'


def heatmap(view: ClassView) -> str:
    """A row per learner (the best score first), a column per check; each cell its status, in words and colour."""
    checks = "".join(f'<th class="check" title="{escape(check)}">{escape(check)}</th>' for check in view.checks)
    rows = []
    for learner in view.learners:
        cells = []
        for check in view.checks:
            status = learner.statuses.get(check)
            said = f"{learner.name}, {check}: {status or 'not graded'}"
            said += f": {learner.errors[check]}" if check in learner.errors else ""
            cells.append(f'<td class="{status or "none"}" title="{escape(said)}">{status or "-"}</td>')
        score = f"{number(learner.score)}/{number(learner.max_score)}"
        rows.append(row(cell(learner.name), cell(score), *cells))
    title = "<h2>Learners and checks</h2>"
    table = f'<table class="heatmap"><tr><th>learner</th><th>score</th>{checks}</tr>{"".join(rows)}</table>'
    return f'{title}<div class="wide">{table}</div>'


def scores(view: ClassView) -> str:
    counts = view.score_counts()
    most = max((count for _, count in counts), default=1)
    rows = [
        row(cell(number(score)), cell(count), f"<td>{bar(count / most, f'{count} learners')}</td>")
        for score, count in counts
    ]
    title = f"<h2>Scores (of {escape(number(view.max_score))})</h2>"
    return f'{title}<table class="scores">{head("score", "learners", "")}{"".join(rows)}</table>'


def page_cell(page: str | None, pages_url: str | None) -> str:
    """The course page: a link under `pages_url` when given, else its path."""
    if not page:
        return "<td></td>"
    if pages_url:
        return f'<td><a href="{escape(pages_url.rstrip("/") + "/" + page)}">{escape(page)}</a></td>'
    return f"<td><code>{escape(page)}</code></td>"


def mistakes(view: ClassView, pages_url: str | None) -> str:
    title = "<h2>Named mistakes, by how many learners made them</h2>"
    if not view.mistakes:
        return f"{title}<p>No named mistake.</p>"
    rows = [
        row(cell(m.check), cell(m.words), cell(m.learners), cell(NAMES.join(m.names)), page_cell(m.page, pages_url))
        for m in view.mistakes
    ]
    header = head("check", "mistake", "learners", "who", "course page")
    return f'{title}<table class="mistakes">{header}{"".join(rows)}</table>'


def stops(view: ClassView) -> str:
    title = "<h2>Where learners stop: their first todo check</h2>"
    rows = [row(cell(check), cell(count)) for check, count in view.stops]
    table = f'<table class="stops">{head("check", "learners")}{"".join(rows)}</table>' if rows else ""
    return f'{title}{table}<p class="finished">learners with no todo check: {view.finished}</p>'


def stopped(view: ClassView) -> str:
    if not view.stopped:
        return ""
    rows = [row(cell(s.learner), cell(s.status), cell(" ".join(s.checks)), cell(s.reason)) for s in view.stopped]
    header = head("learner", "status", "checks", "reason")
    return f'<h2>Errors and time-outs</h2><table class="stopped">{header}{"".join(rows)}</table>'


def learner_list(title: str, kind: str, said: list[tuple[str, str]]) -> str:
    """A list of learners, each with why; nothing where there is none."""
    if not said:
        return ""
    items = "".join(f"<li>{escape(name)}: {escape(why)}</li>" for name, why in said)
    return f'<h2>{escape(title)}</h2><ul class="{kind}">{items}</ul>'


def render(view: ClassView, pages_url: str | None = None) -> str:
    parts = [
        "<h1>GPT-2 grader: class report</h1>",
        f'<p class="headline">{escape(headline(view))}.</p>',
        pass_rates(view),
        heatmap(view),
        scores(view),
        mistakes(view, pages_url),
        stops(view),
        stopped(view),
        learner_list("Could not be graded", "ungraded", [(ln.name, ln.ungraded) for ln in view.ungraded]),
        learner_list("Grades in doubt", "flagged", [(ln.name, ln.flag) for ln in view.flagged]),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>GPT-2 grader: class report</title>'
        f'<link rel="icon" href="data:,"><style>{STYLE}</style></head><body>{"".join(parts)}</body></html>'
    )
