"""Hostile jobs over HTTP: handlers and stores a node must not run or touch.

With no admin configured every local user may use the API, so a job's
``handler`` (a module a node process imports and calls) and its
``source``/``target`` (stores a node process opens, creates, overwrites)
must come from the node's config: ``[replicator] handlers`` and
``[replicator] stores`` (by default the directory of the node's SQLite
store). Anything else is a 403 ``forbidden`` that changes nothing: no job
in ``/_scheduler/jobs``, no document, no module imported, no file created.

Two real nodes for the module, each its whole tree (the doc processor
included, so an accepted document runs): ``plain`` with the default
config, ``configured`` started from a config file that allows a handler
module, one exact handler, a second directory and a URL prefix. The
handlers are modules written into a directory put on the nodes' path;
each writes a marker file when imported (and its ``run`` one when called),
named with the node's process group, so "never imported" is seen on disk.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import fdblayer
from actors.settings.config import Config, load
from actors.node.root import ROOT_FLAGS, root_children
from supervision import start_node
from tests.procs import free_port, group_pids, wait_until

from .http import describe, is_couch_error, request

pytestmark = pytest.mark.timeout(300)

#: Handler modules (written by the ``modules`` fixture); none is in any config but the configured node's.
EVIL, ALLOWED, EXACT = "policy_evil_mod", "policy_allowed_mod", "policy_exact_mod"
#: Allowed by the configured node, but no such module exists.
MISSING = "policy_missing_mod"
MODULE = textwrap.dedent("""\
    import os
    from pathlib import Path

    MARKERS = Path({markers!r})
    (MARKERS / f"imported-{{__name__}}-{{os.getpgid(0)}}-{{os.getpid()}}").touch()


    def run(ctx):
        (MARKERS / f"ran-{{__name__}}-{{os.getpgid(0)}}-{{ctx.job_id}}").touch()


    def other(ctx):
        run(ctx)
    """)


class PolicyNode:
    """A node started as ``otpjobs node start`` starts it (``root_children``), its
    store in ``<directory>/data`` (the node's data directory)."""

    def __init__(self, directory: Path, ini: str | None = None) -> None:
        self.data = directory / "data"
        self.data.mkdir()
        if ini is None:
            config = Config()
        else:
            path = directory / "node.ini"
            path.write_text(ini.format(data=self.data, directory=directory))
            config = load(path)
        self.port, self.http_port = free_port(), free_port()
        config.set("node", "port", self.port)
        config.set("node", "http_port", self.http_port)
        config.set("node", "store", f"sqlite:///{self.data}/store.db?synchronous=NORMAL")
        config.set("replicator", "doc_owner_timeout", 5)
        fdblayer.open(f"sqlite:///{self.data}/src.db").close()  # the replications' source exists
        self.node = start_node(self.port, ROOT_FLAGS, root_children(config), level=logging.WARNING)
        self.pgid = self.node.pgid

    def request(self, method: str, path: str, body: Any = None) -> Any:
        return request(self.http_port, method, path, body)

    def jobs(self) -> list[str]:
        reply = self.request("GET", "/_scheduler/jobs")
        assert reply.status == 200, describe(reply)
        return [job["id"] for job in reply.json()["jobs"]]

    def cancel_all(self) -> None:
        for job_id in self.jobs():
            self.request("POST", "/_replicate", {"replication_id": job_id, "cancel": True})

    def stop(self) -> None:
        try:
            self.node.stop()
        finally:
            wait_until(lambda: not group_pids(self.pgid), 15, "no process of the node left")


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """The handler modules' directory on this process's path before the nodes fork from it."""
    directory = tmp_path_factory.mktemp("policy-modules")
    markers = directory / "markers"
    markers.mkdir()
    for name in (EVIL, ALLOWED, EXACT):
        (directory / f"{name}.py").write_text(MODULE.format(markers=str(markers)))
    sys.path.insert(0, str(directory))
    try:
        yield markers
    finally:
        sys.path.remove(str(directory))


@pytest.fixture(scope="module")
def plain(modules, tmp_path_factory):
    node = PolicyNode(tmp_path_factory.mktemp("policy-plain"))
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def configured(modules, tmp_path_factory):
    node = PolicyNode(
        tmp_path_factory.mktemp("policy-configured"),
        textwrap.dedent(f"""\
        [replicator]
        handlers = {ALLOWED}, {EXACT}:run, {MISSING}
        stores = {{data}}, {{directory}}/extra, postgresql://db.example.invalid/
        """),
    )
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(autouse=True)
def no_jobs_left(request):
    """Each test starts from an empty job table and leaves one."""
    nodes = [request.getfixturevalue(name) for name in ("plain", "configured") if name in request.fixturenames]
    for node in nodes:
        node.cancel_all()
    yield
    for node in nodes:
        node.cancel_all()


def forbidden(reply: Any, field: str, value: str) -> None:
    """A CouchDB-shaped 403 naming the field and its value."""
    assert reply.status == 403, describe(reply)
    assert is_couch_error(reply), describe(reply)
    body = reply.json()
    assert body["error"] == "forbidden" and body["reason"].startswith(f"{field} {value!r} is not allowed: "), body


def imported(directory: Path, node: PolicyNode, module: str = "") -> list[str]:
    """The markers of the modules (``module``: that one) a process of ``node`` imported."""
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.name.startswith(f"imported-{module}") and p.name.split("-")[-2] == str(node.pgid)
    )


def ran(directory: Path, node: PolicyNode, module: str, job_id: str) -> Path:
    """The marker ``module:run`` writes when it runs job ``job_id`` on ``node``."""
    return directory / f"ran-{module}-{node.pgid}-{job_id}"


def sqlite(path: Path | str) -> str:
    return f"sqlite:///{path}"


# ------------------------------------------------------------------ handlers


@pytest.mark.parametrize(
    "handler", [f"{EVIL}:run", "os:getcwd", "subprocess:run", f"{ALLOWED}:run", "tests.actors.scheduler_fixtures:idle"]
)
def test_a_handler_not_configured_is_refused_and_never_imported(plain, modules, handler) -> None:
    job_id = f"evil-{handler}"
    for body in (
        {"replication_id": job_id, "handler": handler},
        {"replication_id": job_id, "handler": handler, "continuous": True},
        {"handler": handler, "source": sqlite(plain.data / "a.db"), "target": sqlite(plain.data / "b.db")},
    ):
        forbidden(plain.request("POST", "/_replicate", body), "handler", handler)
    assert plain.jobs() == []
    assert plain.request("GET", f"/_scheduler/jobs/{job_id.replace(':', '%3A')}").status == 404
    assert imported(modules, plain) == []
    assert not any(p.name.startswith("ran-") and f"-{plain.pgid}-" in p.name for p in modules.iterdir())


def test_a_configured_handler_module_is_accepted_and_runs(configured, modules) -> None:
    reply = configured.request("POST", "/_replicate", {"replication_id": "mod-run", "handler": f"{ALLOWED}:run"})
    assert reply.status == 202 and reply.json() == {"ok": True, "_local_id": "mod-run"}, describe(reply)
    wait_until(lambda: ran(modules, configured, ALLOWED, "mod-run").exists(), 30, "the allowed handler ran")
    reply = configured.request("POST", "/_replicate", {"replication_id": "mod-other", "handler": f"{ALLOWED}:other"})
    assert reply.status == 202, describe(reply)  # a module entry: every attribute
    # ...while a handler of no entry is still refused on that node.
    forbidden(configured.request("POST", "/_replicate", {"handler": f"{EVIL}:run"}), "handler", f"{EVIL}:run")
    wait_until(lambda: ran(modules, configured, ALLOWED, "mod-other").exists(), 30, "the other attribute ran")
    assert imported(modules, configured, EVIL) == []


def test_a_configured_callable_allows_that_callable_only(configured, modules) -> None:
    reply = configured.request("POST", "/_replicate", {"replication_id": "exact-run", "handler": f"{EXACT}:run"})
    assert reply.status == 202, describe(reply)
    wait_until(lambda: ran(modules, configured, EXACT, "exact-run").exists(), 30, "the allowed callable ran")
    for handler in (f"{EXACT}:other", f"{EXACT}:run.__globals__", f"{EXACT}x:run"):
        forbidden(
            configured.request("POST", "/_replicate", {"replication_id": "exact-no", "handler": handler}),
            "handler",
            handler,
        )
    assert "exact-no" not in configured.jobs()
    assert not ran(modules, configured, EXACT, "exact-no").exists()


def test_handlers_cannot_be_allowed_over_http(plain, modules) -> None:
    for key in ("handlers", "stores"):
        reply = plain.request("PUT", f"/_node/_local/_config/replicator/{key}", EVIL)
        assert reply.status == 400 and "can only be changed in the config file" in reply.json()["reason"], describe(
            reply
        )
    forbidden(plain.request("POST", "/_replicate", {"handler": f"{EVIL}:run"}), "handler", f"{EVIL}:run")
    assert plain.jobs() == [] and imported(modules, plain) == []


# -------------------------------------------------------------------- stores


def test_a_target_outside_the_data_directory_is_refused_and_not_created(plain, tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = sqlite(plain.data / "src.db")
    for target in (sqlite(elsewhere / "x.db"), {"url": sqlite(elsewhere / "x.db")}):
        forbidden(
            plain.request("POST", "/_replicate", {"source": source, "target": target}),
            "target",
            sqlite(elsewhere / "x.db"),
        )
    forbidden(
        plain.request("POST", "/_replicate", {"source": sqlite(elsewhere / "x.db"), "target": source}),
        "source",
        sqlite(elsewhere / "x.db"),
    )
    assert plain.jobs() == [] and list(elsewhere.iterdir()) == []


def test_dot_dot_and_symlinks_cannot_leave_the_data_directory(plain, tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = plain.data / f"link-{tmp_path.name}"
    link.symlink_to(elsewhere)
    file_link = plain.data / f"victim-{tmp_path.name}.db"
    file_link.symlink_to(elsewhere / "victim.db")  # dangling: SQLite would create the file it points to
    try:
        source = sqlite(plain.data / "src.db")
        assert plain.data.parent.parent == tmp_path.parent  # both under pytest's base directory
        for target in (
            f"sqlite:///{plain.data}/../../{tmp_path.name}/elsewhere/dots.db",
            f"sqlite:///{plain.data}/%2E%2E/%2E%2E/{tmp_path.name}/elsewhere/dots.db",
            sqlite(link / "sym.db"),
            sqlite(file_link),
        ):
            forbidden(plain.request("POST", "/_replicate", {"source": source, "target": target}), "target", target)
            forbidden(
                plain.request("PUT", "/_replicator/escape", {"source": source, "target": target}), "target", target
            )
        assert plain.jobs() == [] and list(elsewhere.iterdir()) == []
        assert plain.request("GET", "/_replicator/escape").status == 404
    finally:
        link.unlink()
        file_link.unlink()


def test_a_target_is_accepted_inside_the_data_directory_only(plain, tmp_path) -> None:
    (tmp_path / "elsewhere").mkdir()
    source, inside = sqlite(plain.data / "src.db"), plain.data / "sub" / "copy.db"
    (plain.data / "sub").mkdir(exist_ok=True)
    reply = plain.request(
        "POST", "/_replicate", {"replication_id": "inside", "source": source, "target": sqlite(inside)}
    )
    assert reply.status == 202, describe(reply)
    wait_until(lambda: inside.exists(), 30, "the replication inside the data directory created its target")
    outside = sqlite(tmp_path / "elsewhere" / "copy.db")
    forbidden(
        plain.request("POST", "/_replicate", {"replication_id": "outside", "source": source, "target": outside}),
        "target",
        outside,
    )
    assert "outside" not in plain.jobs() and not (tmp_path / "elsewhere" / "copy.db").exists()


def test_the_nodes_own_store_is_never_a_target(plain) -> None:
    """A replication into the node's own store would overwrite its jobs: refused, though it is in the data directory."""
    source, own = sqlite(plain.data / "src.db"), sqlite(plain.data / "store.db") + "?synchronous=FULL"
    forbidden(
        plain.request("POST", "/_replicate", {"replication_id": "own", "source": source, "target": own}), "target", own
    )
    assert plain.jobs() == []


@pytest.mark.parametrize(
    "url",
    [
        "http://adm:secret@example.invalid/db",
        "fdb://",
        "fdb:///etc/passwd",
        "otpjobs.db",
        "sqlite:////etc/otpjobs.db",
        "sqlite:///nope.db?mode=bogus",
    ],
)
def test_other_store_urls_are_refused_by_default(plain, url) -> None:
    source = sqlite(plain.data / "src.db")
    forbidden(
        plain.request("POST", "/_replicate", {"replication_id": "url", "source": source, "target": url}), "target", url
    )
    forbidden(
        plain.request("POST", "/_replicate", {"replication_id": "url", "source": url, "target": source}), "source", url
    )
    assert plain.jobs() == []


def test_configured_stores_replace_the_default(configured, tmp_path) -> None:
    extra = configured.data.parent / "extra"
    extra.mkdir(exist_ok=True)
    source = sqlite(configured.data / "src.db")
    for job_id, target in (
        ("extra", sqlite(extra / "x.db")),
        ("data", sqlite(configured.data / "x.db")),
        ("pg", "postgresql://db.example.invalid/jobs"),
    ):
        reply = configured.request(
            "POST", "/_replicate", {"replication_id": job_id, "source": source, "target": target}
        )
        assert reply.status == 202, describe(reply)
    (tmp_path / "elsewhere").mkdir()
    for target in (
        sqlite(tmp_path / "elsewhere" / "x.db"),
        "postgresql://db.example.invalid.evil.org/jobs",
        "postgresql://db.example.invalid/../x",
        "fdb://",
    ):
        forbidden(
            configured.request("POST", "/_replicate", {"replication_id": "no", "source": source, "target": target}),
            "target",
            target,
        )
    assert "no" not in configured.jobs() and list((tmp_path / "elsewhere").iterdir()) == []


# ----------------------------------------------------------------- documents


def test_a_replicator_document_is_checked_as_a_job_and_not_written(plain, modules, tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    count = plain.request("GET", "/_replicator").json()["doc_count"]
    source = sqlite(plain.data / "src.db")
    for body, field, value in (
        ({"handler": f"{EVIL}:run", "continuous": True}, "handler", f"{EVIL}:run"),
        ({"handler": "os:getcwd"}, "handler", "os:getcwd"),
        ({"source": source, "target": sqlite(elsewhere / "doc.db")}, "target", sqlite(elsewhere / "doc.db")),
        ({"source": {"url": sqlite(elsewhere / "doc.db")}, "target": source}, "source", sqlite(elsewhere / "doc.db")),
        ({"source": source, "target": "http://example.invalid/db"}, "target", "http://example.invalid/db"),
    ):
        forbidden(plain.request("PUT", "/_replicator/evil", body), field, value)
        assert plain.request("GET", "/_replicator/evil").status == 404
    assert plain.request("GET", "/_replicator").json()["doc_count"] == count
    assert plain.request("GET", "/_scheduler/docs/_replicator/evil").status == 404
    # A document allowed in every field is written (and, the doc processor running, runs).
    reply = plain.request("PUT", "/_replicator/fine", {"source": source, "target": sqlite(plain.data / "doc.db")})
    assert reply.status == 201, describe(reply)
    wait_until(lambda: (plain.data / "doc.db").exists(), 30, "the allowed document's replication ran")
    rev = reply.json()["rev"]
    # Replacing it with a forbidden body changes nothing either.
    forbidden(
        plain.request("PUT", f"/_replicator/fine?rev={rev}", {"handler": f"{EVIL}:run"}), "handler", f"{EVIL}:run"
    )
    assert plain.request("GET", "/_replicator/fine").json()["_rev"] == rev
    assert plain.request("DELETE", f"/_replicator/fine?rev={rev}").status == 200
    assert list(elsewhere.iterdir()) == [] and imported(modules, plain) == []


def test_a_configured_handler_document_is_written_and_runs(configured, modules) -> None:
    reply = configured.request("PUT", "/_replicator/allowed", {"handler": f"{ALLOWED}:run"})
    assert reply.status == 201, describe(reply)
    job_id = hashlib.md5(b"_replicator\x00allowed").hexdigest()  # a document's job (the doc processor's)
    wait_until(lambda: ran(modules, configured, ALLOWED, job_id).exists(), 30, "the document ran")
    forbidden(
        configured.request("PUT", "/_replicator/refused", {"handler": f"{EXACT}:other"}), "handler", f"{EXACT}:other"
    )
    assert configured.request("GET", "/_replicator/refused").status == 404
    configured.request("DELETE", f"/_replicator/allowed?rev={reply.json()['rev']}")


def bad_request(reply: Any, start: str) -> None:
    """A CouchDB-shaped 400 whose reason starts with ``start``."""
    assert reply.status == 400 and is_couch_error(reply), describe(reply)
    assert reply.json()["reason"].startswith(start), reply.json()


def test_an_allowed_handler_whose_module_is_missing_is_a_bad_request(configured) -> None:
    """Accepted with a 202 it would crash once and vanish: said up front instead."""
    for body in (
        {"replication_id": "missing", "handler": f"{MISSING}:run"},
        {"replication_id": "missing", "handler": f"{MISSING}:run", "continuous": True},
    ):
        bad_request(
            configured.request("POST", "/_replicate", body),
            f"job spec handler = '{MISSING}:run': no module named '{MISSING}' on the node's path",
        )
    assert configured.jobs() == []


def test_a_replication_from_a_missing_sqlite_store_is_a_bad_request_and_creates_nothing(plain) -> None:
    missing, target = plain.data / "missing.db", plain.data / "from-missing.db"
    reply = plain.request(
        "POST", "/_replicate", {"replication_id": "from-missing", "source": sqlite(missing), "target": sqlite(target)}
    )
    bad_request(reply, f"job spec source = {sqlite(missing)!r}: no such store: {missing} does not exist")
    assert plain.jobs() == [] and not missing.exists() and not target.exists()


def test_a_malformed_body_is_still_a_bad_request_first(plain) -> None:
    """Validation comes before the policy: a malformed job is a 400, as before."""
    for body in ({"handler": "no-colon"}, {"handler": 1}, {"source": "a"}):
        reply = plain.request("POST", "/_replicate", body)
        assert reply.status == 400 and reply.json()["error"] == "bad_request", describe(reply)
        reply = plain.request("PUT", "/_replicator/malformed", body)
        assert reply.status == 400 and reply.json()["error"] == "bad_request", describe(reply)
    # ...and a well-formed one naming what is not allowed is a 403.
    forbidden(plain.request("POST", "/_replicate", {"handler": "a.b:c"}), "handler", "a.b:c")
    assert plain.jobs() == []
