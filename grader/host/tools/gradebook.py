"""The gradebook CSV (`grader.host.tools.batch.write_gradebook`'s, batch's and the notebooks') as the class view
reads it back: each row a learner, a record per check graded."""

from __future__ import annotations

from grader.host.results import ReadBack
from grader.host.tools.batch import POINTS_COLUMN


def gradebook_entries(rows: list[list[str]], assignment: str | None) -> list[tuple[str, object]]:
    """The gradebook's rows as the class view reads them, each a learner's fields and a record per check graded."""
    header = rows[0]
    checks = [column for column in header[1:-3] if POINTS_COLUMN.format(check=column) in header]
    entries: list[tuple[str, object]] = []
    for number, row in enumerate(rows[1:], 2):
        if len(row) != len(header):
            entries += [(f"row {number}", ValueError(f"{len(row)} cells where the header has {len(header)}"))] * bool(
                row
            )
            continue
        cells = dict(zip(header, row, strict=True))
        records = [
            {"id": check, "status": cells[check], "points": number_or_text(cells[POINTS_COLUMN.format(check=check)])}
            for check in checks
            if cells[check]
        ]
        found = {
            "name": cells[header[0]],
            "records": records,
            "ungraded": cells["error"],
            "flag": cells.get("flag", ""),
        }
        entries.append((f"row {number}", found | {key: number_or_text(cells[key]) for key in ("score", "max_score")}))
    return entries


def number_or_text(cell: str) -> float | str:
    """A number cell as a number; what is not one stays text, which the class view then refuses by its column."""
    try:
        return float(cell)
    except ValueError:
        return cell


GRADEBOOK_COLUMNS = ["score", "max_score", "error"]  # the last three, after each check's statuses, points and flag
READ_BACK = ReadBack(  # the CSV, batch's and the notebooks' (`first` "submission" or "student")
    "a gradebook CSV",
    claims=lambda rows: (
        bool(rows) and rows[0][:1] in (["submission"], ["student"]) and rows[0][-3:] == GRADEBOOK_COLUMNS
    ),
    fields={key: (key,) for key in ("name", "score", "max_score", "records", "ungraded", "flag")},
    entries=gradebook_entries,
)
