"""A job's page (``job_page.job_page``) and the hosts section without a node: what each view
shows, in which order, every value escaped (job ids, data, progress, errors and hosts are user data)."""

from __future__ import annotations

import re

from actors.http import job_page, status_page

MARKUP = '<img src=x onerror="document.title=1">'
ESCAPED = "&lt;img src=x onerror=&quot;document.title=1&quot;&gt;"
NOW = 1_800_000_000.0


def view(**fields) -> dict:
    base = {
        "id": "j1",
        "state": "finished",
        "scheduled_time": 0,
        "attempt": 3,
        "max_attempts": 3,
        "outcome": "failed",
        "progress": {},
        "error": None,
        "last_error": None,
        "worker": "host-1",
        "started": NOW - 30,
        "ended": NOW - 10,
        "data": {"to": "a@example.com"},
        "result": None,
    }
    return dict(base, **fields)


def render(v: dict, **kw) -> str:
    return job_page.job_page(node="n1", job_type="mail", view=v, csrf="5f.tok", now=NOW, **kw)


def test_every_failed_attempt_is_listed_newest_first_with_its_traceback() -> None:
    errors = [
        {
            "attempt": i,
            "at": NOW - 40 + i,
            "type": "Bounce",
            "message": f"try {i}",
            "traceback": f"Traceback (most recent call last):\n  line {i}\nBounce: try {i}",
        }
        for i in (1, 2, 3)
    ]
    text = render(view(errors=errors, last_error={"type": "Bounce", "message": "try 3", "traceback": "x"}))
    entries = re.findall(r'<li class="job-error">(.*?)</li>', text, re.S)
    assert [re.search(r"attempt (\d)", e).group(1) for e in entries] == ["3", "2", "1"]
    assert all("<details><summary>traceback</summary><pre>Traceback (most recent call last):" in e for e in entries)
    assert "<code>Bounce</code>: try 3" in entries[0] and "ago</time>" in entries[0]
    assert '<span class="state failed" id="job-state">finished (failed)</span>' in text


def test_without_an_error_history_the_last_error_is_shown() -> None:
    text = render(view(last_error={"type": "ValueError", "message": "bad", "traceback": "Traceback: tb"}))
    entries = re.findall(r'<li class="job-error">(.*?)</li>', text, re.S)
    assert len(entries) == 1 and "<code>ValueError</code>: bad" in entries[0]
    assert "<pre>Traceback: tb</pre>" in entries[0]
    assert '<p class="empty">No error.</p>' in render(view(outcome="succeeded", errors=[]))


def test_buttons_follow_the_state_and_carry_the_token() -> None:
    finished = render(view(outcome="succeeded", result={"sent": 1}))
    assert re.findall(r'<form method="post" action="([^"]+)">', finished) == [
        "/_utils/jobs/mail/j1/_retry",
        "/_utils/jobs/mail/j1/_cancel",
    ]
    assert finished.count('<input type="hidden" name="csrf" value="5f.tok">') == 2
    assert 'name="was" value="finished"' in finished and "<h2>Result</h2>" in finished
    for state in ("pending", "claimed", "running"):
        text = render(view(state=state, outcome=None, ended=None))
        assert re.findall(r'action="([^"]+)"', text) == ["/_utils/jobs/mail/j1/_cancel"]
        assert 'name="was" value="unfinished"' in text and f'class="state {state}"' in text
    reserved = render(view(), reserved="act on the document instead")
    assert "<form" not in reserved and "act on the document instead" in reserved
    assert 'id="notice">Retried' in render(view(), done="retried")
    assert 'id="notice"' not in render(view(), done=MARKUP)  # only known words, never echoed


def test_every_value_is_escaped() -> None:
    hostile = view(
        id=MARKUP,
        data={MARKUP: MARKUP},
        progress={"step": MARKUP},
        worker=MARKUP,
        errors=[{"attempt": MARKUP, "at": MARKUP, "type": MARKUP, "message": MARKUP, "traceback": MARKUP}],
        priority=MARKUP,
        **{MARKUP: MARKUP},
    )
    text = job_page.job_page(node=MARKUP, job_type=MARKUP, view=hostile, csrf='"><b>', now=NOW, reserved=None)
    assert "<img" not in text and "<b>" not in text and ESCAPED in text
    assert 'value="&quot;&gt;&lt;b&gt;"' in text
    assert "/_utils/jobs/%3Cimg%20src%3Dx%20onerror%3D%22document.title%3D1%22%3E/" in text  # the form's path
    missing = job_page.missing_job_page(node=MARKUP, job_type=MARKUP, job_id=MARKUP, done="cancelled")
    assert "<img" not in missing and ESCAPED in missing and 'id="notice">Cancelled' in missing


def test_the_hosts_section_escapes_and_bounds_what_hosts_wrote() -> None:
    hosts = [
        {
            "host": MARKUP,
            "types": [MARKUP, "mail"],
            "concurrency": 4,
            "busy": 1,
            "claimed": 0,
            "running": [{"type": "mail", "id": MARKUP}],
            "last_beat": NOW - 2,
            "alive": True,
        },
        {"host": "gone", "types": "not a list", "running": "nor this", "last_beat": NOW - 900, "alive": False},
    ]
    hosts += [{"host": f"h{i}", "alive": True, "last_beat": NOW} for i in range(status_page.MAX_HOSTS)]
    text = status_page.hosts_section(hosts, NOW)
    assert "<img" not in text and text.count('<tr class="host">') == status_page.MAX_HOSTS
    link = "/_utils/jobs/mail/%3Cimg%20src%3Dx%20onerror%3D%22document.title%3D1%22%3E"
    assert f'<a href="{link}"><code>{ESCAPED}</code></a>' in text
    assert '<td class="state failed">silent</td>' in text and "2 more hosts" in text
    assert status_page.hosts_section([], NOW).count("No worker host.") == 1


def test_ids_a_url_cannot_name_are_not_linked() -> None:
    assert status_page.job_link("mail", "a/b") == '<a href="/_utils/jobs/mail/a%2Fb"><code>a/b</code></a>'
    for job_type, job_id in (("mail", ".."), ("mail", "."), ("..", "x"), (["a", "b"], "x"), ("mail", None)):
        assert status_page.job_path(job_type, job_id) is None
        assert "<a " not in status_page.job_link(job_type, job_id)
