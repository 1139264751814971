"""The report as JUnit XML: one testsuite per part, one testcase per check, points as properties."""

from __future__ import annotations

import re
from dataclasses import asdict
from itertools import groupby
from xml.etree import ElementTree

from grader.host.results import RECORD_VERSION, CheckResult, Report

# The JUnit element each status becomes; a pass has none.
OUTCOMES = {"fail": "failure", "error": "error", "timeout": "error", "todo": "skipped"}

# XML 1.0 cannot hold most control characters, and a learner's exception message may contain any.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def counts(checks: list[CheckResult]) -> dict[str, str]:
    outcomes = [OUTCOMES.get(c.status) for c in checks]
    return {
        "tests": str(len(checks)),
        "failures": str(outcomes.count("failure")),
        "errors": str(outcomes.count("error")),
        "skipped": str(outcomes.count("skipped")),
        "time": f"{sum(c.seconds for c in checks):.3f}",
    }


def properties(parent: ElementTree.Element, values: dict) -> None:
    group = ElementTree.SubElement(parent, "properties")
    for name, value in values.items():
        ElementTree.SubElement(group, "property", name=name, value=xml_text(str(value)))


def testcase(suite: ElementTree.Element, check: CheckResult, assignment: str | None) -> None:
    case = ElementTree.SubElement(suite, "testcase", classname=check.part, name=check.id, time=f"{check.seconds:.3f}")
    # The check's record as properties, each field that has a value (XML has no null).
    properties(case, {name: value for name, value in asdict(check.record(assignment)).items() if value is not None})
    outcome = OUTCOMES.get(check.status)
    if outcome:
        element = ElementTree.SubElement(case, outcome, message=xml_text(check.message), type=check.status)
        # The attribute stays the message (readers show it as the title); the text is the whole diagnosis.
        element.text = xml_text("\n".join(check.diagnosis()))
    if check.notes:
        ElementTree.SubElement(case, "system-out").text = xml_text("\n".join(check.notes))


def render(report: Report) -> str:
    root = ElementTree.Element("testsuites", name=report.title(), **counts(report.checks))
    for part, checks in groupby(report.checks, key=lambda c: c.part):
        checks = list(checks)
        suite = ElementTree.SubElement(root, "testsuite", name=part, **counts(checks))
        properties(
            suite,
            {
                "reference": report.reference,
                "package": report.package,
                **({"assignment": report.assignment} if report.assignment else {}),
                "score": sum(c.score for c in checks),
                "max_score": sum(c.max_score for c in checks),
                "record_version": RECORD_VERSION,
            },
        )
        for check in checks:
            testcase(suite, check, report.assignment)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True)
