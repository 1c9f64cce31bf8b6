"""docs/events.md lists exactly the structured events the code logs.

An event is a ``report("name", ...)`` of the supervision layer or a log
call whose message starts ``name key=``; the list in the doc is its table
rows' first cell. A new, renamed or removed event fails this test until
the doc says so too.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVENT_CALL = re.compile(r'(?:report\(\s*"([a-z_]+)"|log(?:ger)?\.(?:debug|info|warning|error|critical)\(\s*"'
                        r'([a-z_]+) [a-z_]+=)')
DOC_ROW = re.compile(r"^\| `([a-z_]+)` \|", re.MULTILINE)


def events_in_code() -> set[str]:
    found = set()
    for package in ("supervision", "fdblayer", "actors"):
        for path in (ROOT / package).rglob("*.py"):
            for match in EVENT_CALL.finditer(path.read_text()):
                found.add(match.group(1) or match.group(2))
    return found


def test_the_events_doc_lists_every_event_the_code_logs_and_no_other() -> None:
    documented = DOC_ROW.findall((ROOT / "docs" / "events.md").read_text())
    assert len(documented) == len(set(documented)), "an event listed twice"
    in_code = events_in_code()
    assert len(in_code) > 40  # the scan itself works
    assert sorted(in_code - set(documented)) == [], "logged but not in docs/events.md"
    assert sorted(set(documented) - in_code) == [], "in docs/events.md but never logged"
