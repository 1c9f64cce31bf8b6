"""docs/events.md lists exactly the structured events the code logs.

An event is a ``report("name", ...)`` of the supervision layer or a log
call (``log``/``logger``/``logging`` ``.debug`` ... ``.exception``/``.log``)
whose message is a literal starting with the event's snake_case name,
then ``key=value`` pairs; the list in the doc is its table rows' first
cell. Every log call is found by reading the code's syntax tree, so a
call spread over lines counts too, and a log call in another shape (free
prose, a message built at run time) fails the test unless it is one of
the few listed in ``PROSE_LEFT``. A new, renamed or removed event fails
this test until the doc says so too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("supervision", "fdblayer", "actors")
LEVELS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
#: What a logger looks like in a call: ``log``, ``logger``, ``self._log``, ``logging``, ``getLogger(...)``.
LOGGER = re.compile(r"(?:(?:^|[._])(?:log|logger|logging)|getLogger\(.*\))$", re.IGNORECASE)
EVENT = re.compile(r"^([a-z][a-z0-9]*(?:_[a-z0-9]+)*)(?: [a-z_]+=|$)")
DOC_ROW = re.compile(r"^\| `([a-z0-9_]+)` \|", re.MULTILINE)
#: Log calls that are not events, by file and message: the report
#: function's own line (its event is the ``report`` call's), and free prose
#: in modules being rewritten elsewhere (convert them when that is merged).
PROSE_LEFT = {
    ("supervision/reports.py", "%s"),
}


def _message(call: ast.Call) -> ast.expr | None:
    args = call.args[1:] if call.func.attr == "log" else call.args  # type: ignore[attr-defined]
    return args[0] if args else None


def scan() -> tuple[set[str], list[tuple[str, int, str]]]:
    """(events, other log calls as (path, line, message source))."""
    events: set[str] = set()
    others: list[tuple[str, int, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                if isinstance(func, ast.Name) and func.id == "report":
                    first = node.args[0] if node.args else None
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        events.add(first.value)
                    continue
                if not (
                    isinstance(func, ast.Attribute) and func.attr in LEVELS and LOGGER.search(ast.unparse(func.value))
                ):
                    continue
                msg = _message(node)
                text = msg.value if isinstance(msg, ast.Constant) and isinstance(msg.value, str) else None
                match = EVENT.match(text) if text is not None else None
                if match:
                    events.add(match.group(1))
                elif (rel, text) not in PROSE_LEFT:
                    others.append((rel, node.lineno, text if text is not None else ast.unparse(msg or node)))
    return events, others


def test_every_log_call_is_a_structured_event() -> None:
    _, others = scan()
    assert others == [], "log calls not in the `event key=value ...` shape (make them events, list them in the doc)"


def test_the_events_doc_lists_every_event_the_code_logs_and_no_other() -> None:
    documented = DOC_ROW.findall((ROOT / "docs" / "events.md").read_text())
    assert len(documented) == len(set(documented)), "an event listed twice"
    in_code, _ = scan()
    assert len(in_code) > 40  # the scan itself works
    assert sorted(in_code - set(documented)) == [], "logged but not in docs/events.md"
    assert sorted(set(documented) - in_code) == [], "in docs/events.md but never logged"


def test_the_scan_sees_what_it_must() -> None:
    """The checks above can fail: a prose line, a multi-line event call and
    a keyless event are each told apart."""
    sample = ast.parse('log.warning("Store %s: gone", x)\nlogger.info(\n    "a_b c=%s", 1)\nlog.info("done")\n')
    calls = [n for n in ast.walk(sample) if isinstance(n, ast.Call)]
    texts = [_message(c).value for c in calls]  # type: ignore[union-attr]
    assert [bool(EVENT.match(t)) for t in texts] == [False, True, True]
