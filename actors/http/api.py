"""The node's HTTP API: a small WSGI app answering as CouchDB does.

Principle: routing and HTTP details live here; the shapes come from
:mod:`actors.http.monitoring`, credentials from :mod:`actors.http.auth`, and every
fact about jobs from the node's scheduler through request/reply calls
(a :class:`~actors.scheduler.server.SchedulerClient`), so a request never sees
stale data and this process keeps no state but sessions' secret.
Documents (``_replicator``, ``_scheduler/docs``) are read and written in
the store (:mod:`fdblayer.docs`): the nodes' doc processors run them.

Paths are split on the raw request URI and each segment is percent-decoded
with ``unquote`` (never ``unquote_plus``): ``%2F`` stays inside a segment,
``+`` stays literal and empty segments (``//_scheduler``) are dropped.
Every answer is JSON (whatever ``Accept`` says) except Prometheus text
and the status page (HTML, :mod:`actors.http.status_page`, at ``/_utils/``,
and a queue job's page at ``/_utils/jobs/{type}/{id}``, whose retry and
cancel forms post with a CSRF token: :meth:`App.check_form`); every error
is ``{"error", "reason"}`` with CouchDB's status (but the 404 of a job's
page asked for by a browser, ``Accept: text/html``: a page saying so).

``_config``: ``[replicator]`` and ``[couch_jobs]`` keys are read from and
written to the node's settings keeper (:class:`actors.settings.keeper.ConfigServer`),
which hands a change to the actors running with it (the scheduler, the
queue's server) before it answers, so a change takes effect at once and
outlives a restart of those actors and of this process. A ``PUT`` also
writes the change into the node's config file, as CouchDB does, unless the
request says ``X-Couch-Persist: false`` or the node has no config file;
then the change lives in the running node only. In a tree without the
keeper, ``[replicator]`` goes to the scheduler alone.

Jobs (``POST /_replicate``) and ``_replicator`` documents name code and
stores a node process will import and open: each is checked against the
node's job policy (:class:`actors.settings.policy.JobPolicy`, from ``[replicator]
handlers`` and ``stores``) once it is well-formed (a malformed one is a 400
first), and one naming what the policy does not allow is a 403
``forbidden`` that adds no job and writes no document.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from http import HTTPStatus
from typing import Any, Callable, Iterable
from urllib.parse import parse_qsl, urlencode

from fdblayer.exceptions import KeyTooLarge
from supervision.exceptions import CallFailed, CallTimeout, NoProc, NodeDown
from supervision.reports import report

from actors import jsonable
from actors.http import job_page, metrics, monitoring, queue_routes, status_page
from actors.http import request as request_mod
from actors.http.request import FormHtml, HttpError, Html, Request, Text, not_allowed, refuse_cross_site
from actors.http.auth import COOKIE_NAME, Auth
from actors.settings.config import RUNTIME_KEYS, ConfigError, ConfigWriteError, format_value, parse_runtime_value
from actors.settings.policy import Forbidden, JobPolicy
from actors.scheduler.core import InvalidJobSpec, InvalidSetting, JobNotFound, JobSpec

log = logging.getLogger(__name__)

VERSION = "3.3.3"
VENDOR = {"name": "otpjobs", "version": "0.1.0"}
#: [replicator] keys the scheduler changes at run time.
REPLICATOR_KEYS = RUNTIME_KEYS["replicator"]
#: Request header that keeps a ``_config`` change out of the config file (CouchDB's).
PERSIST_HEADER = "X-Couch-Persist"

NOT_ADMIN = "You are not a server admin."


class App:
    """The WSGI application.

    Args:
        scheduler: a SchedulerClient (or anything with its methods).
        auth: the node's admins and session secret.
        config: ``{"couch_jobs": {...}}``: the node's start-time sections
            shown by ``_config`` when no keeper answers for them.
        node: this node's name in job entries and ``_node/{node}`` paths.
        store: the store URL holding the documents (``_replicator``,
            ``_scheduler/docs``), opened at the first request that needs it.
        settings: the node's settings keeper's client
            (:class:`~actors.settings.keeper.ConfigClient`): ``[replicator]``
            and ``[couch_jobs]`` read and written at run time through
            ``_config``; None (or a node running no keeper) leaves
            ``[replicator]`` to the scheduler and ``[couch_jobs]`` read-only.
        policy: the handlers and stores jobs and documents may name; None:
            the defaults (the built-in handler, stores in the directory of
            ``store``).
        sampler: the readings of the queue's counters the status page
            charts (:class:`actors.http.throughput.Sampler`); None: no chart.
    """

    def __init__(
        self,
        scheduler: Any,
        auth: Auth,
        config: dict | None = None,
        node: str = "local",
        store: str | None = None,
        settings: Any = None,
        policy: JobPolicy | None = None,
        sampler: Any = None,
    ) -> None:
        self.scheduler = scheduler
        self.sampler = sampler
        self.auth = auth
        self.settings = settings
        self.config = config or {}
        self.node = node
        self.store = store
        self.policy = policy if policy is not None else JobPolicy.from_entries(node_store=store)
        self._db: Any = None
        self._store_lock = threading.Lock()

    # ------------------------------------------------------------- WSGI
    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        req = Request(environ)
        headers: list = []
        try:
            status, payload = self.dispatch(req)
        except HttpError as exc:
            status, payload, headers = exc.status, exc.body(), exc.headers
            if exc.status == 401 and req.segments[:1] == ["_utils"]:  # let a browser ask for credentials
                headers = headers + [("WWW-Authenticate", 'Basic realm="otpjobs", charset="UTF-8"')]
        except KeyTooLarge as exc:  # a name in the request (type, id, database) past the store's key limit
            status, payload = 400, {"error": "bad_request", "reason": str(exc)}
        except (NoProc, CallTimeout, CallFailed, NodeDown) as exc:
            log.warning("http_scheduler_unavailable method=%s path=%s reason=%r", req.method, req.path, exc)
            status, payload = 503, {"error": "service_unavailable", "reason": "the scheduler did not answer"}
        except Exception as exc:  # noqa: BLE001 - one bad request must not take the server down
            log.exception("http_request_failed method=%s path=%s", req.method, req.path)
            status, payload = 500, {"error": "unknown_error", "reason": type(exc).__name__}
        if req.new_cookie:
            headers = headers + [("Set-Cookie", req.new_cookie)]
        headers = headers + req.response_headers
        if isinstance(payload, Text):
            body, ctype = payload.encode(), "text/plain; version=0.0.4; charset=utf-8"
        elif isinstance(payload, Html):
            body, ctype = payload.encode(), "text/html; charset=utf-8"
            headers = headers + (
                status_page.FORM_SECURITY_HEADERS if isinstance(payload, FormHtml) else status_page.SECURITY_HEADERS
            )
        else:
            body, ctype = (jsonable.dumps(payload, separators=(",", ":")) + "\n").encode(), "application/json"
        headers = [
            ("Content-Type", ctype),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "must-revalidate"),
            ("Server", f"CouchDB/{VERSION} (otpjobs)"),
            ("X-Content-Type-Options", "nosniff"),
        ] + headers
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [] if req.method == "HEAD" else [body]

    def dispatch(self, req: Request) -> tuple[int, Any]:
        seg = req.segments
        head = seg[0] if seg else ""
        if req.method not in ("GET", "HEAD"):
            refuse_cross_site(req, form_ok=head in ("_session", "_utils"))
        if head == "":
            return self._get_only(req, lambda: self.welcome())
        if head == "_up" and len(seg) == 1:
            return self._get_only(req, lambda: {"status": "ok", "seeds": {}})
        if head == "_session" and len(seg) == 1:
            return self.session(req)
        if seg == ["_utils"] and not req.path.endswith("/"):  # CouchDB redirects too
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD")
            req.response_headers.append(("Location", "/_utils/"))
            return 301, Html(status_page.redirect_page("/_utils/"))
        self.authorize(req)
        if head == "_utils":
            return self.utils_route(req, seg[1:])
        if head == "_scheduler":
            return self.scheduler_route(req, seg[1:])
        if head == "_replicate" and len(seg) == 1:
            if req.method != "POST":
                raise not_allowed("POST")
            return self.replicate(req)
        if head == "_replicator":
            return self.replicator_route(req, seg[1:])
        if head == "_node" and len(seg) >= 2 and seg[1] in ("_local", self.node):
            return self.node_route(req, seg[2:])
        if head == "_jobs":
            if req.method in ("POST", "DELETE") and len(seg) > 1:
                return queue_routes.jobs_write_route(req, seg[1:], self._store, HttpError)
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD,POST,DELETE" if len(seg) > 1 else "GET,HEAD")
            return queue_routes.jobs_route(req, seg[1:], self._store, HttpError)
        if head == "_workers":
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD")
            return queue_routes.workers_route(req, seg[1:], self._store, HttpError)
        raise HttpError(404, "not_found", "missing")

    @staticmethod
    def _get_only(req: Request, make: Callable[[], Any]) -> tuple[int, Any]:
        if req.method not in ("GET", "HEAD"):
            raise not_allowed("GET,HEAD")
        return 200, make()

    def welcome(self) -> dict:
        return {
            "couchdb": "Welcome",
            "version": VERSION,
            "git_sha": "otpjobs",
            "uuid": hashlib.md5(self.node.encode()).hexdigest(),
            "features": ["scheduler"],
            "vendor": dict(VENDOR),
        }

    # ------------------------------------------------------------- auth
    def authorize(self, req: Request) -> None:
        """Set ``req.user`` or raise 401 (nothing to check with no admin)."""
        if not self.auth.enabled:
            req.user = None
            return
        header = req.header("Authorization")
        if header:
            name = self.auth.basic(header)
            if name is None:
                raise HttpError(401, "unauthorized", "Name or password is incorrect.")
            req.user = name
            return
        token = req.cookie(COOKIE_NAME)
        session = self.auth.session_user(token) if token else None
        if session is None:
            raise HttpError(401, "unauthorized", NOT_ADMIN)
        req.user, issued = session
        if self.auth.clock() - issued > self.auth.timeout * 0.1:  # refresh, as CouchDB does
            req.new_cookie = self.auth.set_cookie_header(self.auth.make_cookie(req.user))

    def session(self, req: Request) -> tuple[int, Any]:
        if req.method == "POST":
            return self.login(req)
        if req.method == "DELETE":
            req.new_cookie = self.auth.clear_cookie_header()
            return 200, {"ok": True}
        if req.method in ("GET", "HEAD"):
            name, how = None, None
            try:
                self.authorize(req)
                name = req.user
                how = "default" if req.header("Authorization") else "cookie"
            except HttpError:
                pass
            admin = name is not None or not self.auth.enabled
            return 200, {
                "ok": True,
                "userCtx": {"name": name, "roles": ["_admin"] if admin else []},
                "info": {"authentication_handlers": ["cookie", "default"], **({"authenticated": how} if how else {})},
            }
        raise not_allowed("GET,HEAD,POST,DELETE")

    def login(self, req: Request) -> tuple[int, Any]:
        ctype = req.content_type
        if ctype == "application/json":
            data = req.json()
            if not isinstance(data, dict):
                raise HttpError(400, "bad_request", "Request body must be a JSON object")
            name = data.get("name", data.get("username"))
            password = data.get("password")
        elif ctype in ("application/x-www-form-urlencoded", ""):
            try:
                form = dict(parse_qsl(req.body().decode(), keep_blank_values=True))
            except UnicodeDecodeError:
                raise HttpError(400, "bad_request", "invalid UTF-8 form body") from None
            name = form.get("name", form.get("username"))
            password = form.get("password")
        else:
            raise HttpError(415, "bad_content_type", "Content-Type must be multipart/form-data or application/json")
        if (
            not isinstance(name, str)
            or not isinstance(password, str)
            or not self.auth.enabled
            or not self.auth.check_password(name, password)
        ):
            raise HttpError(401, "unauthorized", "Name or password is incorrect.")
        req.new_cookie = self.auth.set_cookie_header(self.auth.make_cookie(name))
        return 200, {"ok": True, "name": name, "roles": ["_admin"]}

    # ------------------------------------------------------- _scheduler
    def scheduler_route(self, req: Request, seg: list[str]) -> tuple[int, Any]:
        if not seg or seg[0] not in ("jobs", "docs"):
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD")
            raise HttpError(404, "not found", None)
        if req.method not in ("GET", "HEAD"):
            raise not_allowed("GET,HEAD")
        if seg[0] == "jobs":
            if len(seg) == 1:
                try:
                    limit, skip = monitoring.jobs_params(req.query)
                except monitoring.QueryParseError as exc:
                    raise HttpError(400, "query_parse_error", str(exc)) from None
                total, page = self.scheduler.jobs_page(limit, skip)
                return 200, monitoring.jobs_page_view(total, page, skip)
            if len(seg) == 2:
                try:
                    return 200, monitoring.job_view(self.scheduler.job(seg[1]))
                except JobNotFound:
                    raise HttpError(404, "not_found", "missing") from None
            raise HttpError(404, "not found", None)
        try:
            limit, skip = monitoring.docs_params(req.query)
            states = monitoring.docs_states(req.query)
        except monitoring.QueryParseError as exc:
            raise HttpError(400, "query_parse_error", str(exc)) from None
        db_name, rest = request_mod.split_db(seg[1:])
        if db_name is not None and not rest or db_name is None and not seg[1:]:
            total, page = self._docs_list(db_name, limit, skip, states)
            return 200, {"total_rows": total, "offset": skip, "docs": [monitoring.doc_view(d) for d in page]}
        if db_name is not None and len(rest) == 1:
            return 200, monitoring.doc_view(self._doc(db_name, rest[0]))
        raise HttpError(400, "bad_request", "")

    def _queue_stats(self) -> list | None:
        """Every queue type's counts and events (None: this node has no store)."""
        return None if self.store is None else metrics.queue_stats(self._store())

    def _store(self) -> Any:
        if self.store is None:
            raise HttpError(503, "service_unavailable", "this node has no document store")
        with self._store_lock:
            if self._db is None:
                import fdblayer

                self._db = fdblayer.open(self.store)
            return self._db

    def _docs_list(self, db_name: str | None, limit: int, skip: int, states: list | None) -> tuple[int, list]:
        from fdblayer import docs

        try:
            return docs.list_docs(self._store(), db_name, limit=limit, skip=skip, states=states)
        except docs.InvalidArgument as exc:
            raise HttpError(400, "bad_request", exc.message) from None

    def _doc(self, db_name: str, doc_id: str) -> Any:
        from fdblayer import docs

        try:
            return docs.get(self._store(), db_name, doc_id)
        except (docs.NotFound, docs.InvalidArgument):
            raise HttpError(404, "not_found", "missing") from None

    # -------------------------------------------------------- _replicator
    def replicator_route(self, req: Request, seg: list[str]) -> tuple[int, Any]:
        """``PUT|GET|DELETE /_replicator/{docid}``: permanent jobs, as documents."""
        from fdblayer import docs

        if not seg:
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD")
            total, _ = docs.list_docs(self._store(), docs.REPLICATOR_DB, limit=0)
            return 200, {"db_name": docs.REPLICATOR_DB, "doc_count": total}
        if len(seg) != 1:
            raise HttpError(400, "bad_request", "a document id must be one path segment")
        doc_id = seg[0]
        if doc_id.startswith("_"):
            raise HttpError(400, "illegal_docid", "Only reserved document ids may start with underscore.")
        rev = (req.query.get("rev") or [None])[-1]
        try:
            if req.method in ("GET", "HEAD"):
                doc = docs.get(self._store(), docs.REPLICATOR_DB, doc_id)
                return 200, {"_id": doc.doc_id, "_rev": doc.rev, **doc.body}
            if req.method == "PUT":
                body = req.json()
                if not isinstance(body, dict):
                    raise HttpError(400, "bad_request", "Document must be a JSON object")
                if body.get("_id", doc_id) != doc_id:
                    raise HttpError(400, "bad_request", "Document id must match the URL")
                docs.check_names(docs.REPLICATOR_DB, doc_id)
                self._allowed(req, docs.check_body(body))  # well-formed, then allowed, then written
                new_rev = docs.put(
                    self._store(), docs.REPLICATOR_DB, doc_id, body, rev=body.get("_rev", rev), check_rev=True
                )
                return 201, {"ok": True, "id": doc_id, "rev": new_rev}
            if req.method == "DELETE":
                rev = rev or (req.header("If-Match") or "").strip('"') or None
                current = docs.get(self._store(), docs.REPLICATOR_DB, doc_id)  # 404 first, as CouchDB
                if rev is None:  # CouchDB deletes only a named revision
                    raise HttpError(
                        409,
                        "conflict",
                        f"Document update conflict: give the revision to delete (?rev={current.rev} or If-Match)",
                    )
                new_rev = docs.delete(self._store(), docs.REPLICATOR_DB, doc_id, rev=rev)
                return 200, {"ok": True, "id": doc_id, "rev": new_rev}
        except docs.NotFound:
            raise HttpError(404, "not_found", "missing") from None
        except docs.Conflict:
            raise HttpError(409, "conflict", "Document update conflict.") from None
        except (docs.InvalidArgument, docs.EncodingError) as exc:
            raise HttpError(400, "bad_request", exc.message) from None
        raise not_allowed("GET,HEAD,PUT,DELETE")

    # -------------------------------------------------------- _replicate
    def replicate(self, req: Request) -> tuple[int, Any]:
        """A transient job. Differs from CouchDB in one way: a one-shot job
        is answered at once (202) instead of after it completes."""
        body = req.json()
        if not isinstance(body, dict):
            raise HttpError(400, "bad_request", "Request body must be a JSON object")
        job_id = body.get("replication_id") or body.get("id") or monitoring.replication_id(body)
        if not isinstance(job_id, str):
            raise HttpError(400, "bad_request", "replication_id must be a string")
        if body.get("cancel") is True:
            if not self.scheduler.remove_job(job_id):
                raise HttpError(404, "not_found", job_id)
            return 200, {"ok": True, "_local_id": job_id}
        spec = {
            "id": job_id,
            "source": monitoring.endpoint(body.get("source")),
            "target": monitoring.endpoint(body.get("target")),
            "continuous": body.get("continuous", False),
            "handler": body.get("handler"),
            "options": body.get("options"),
            "user": req.user,
            "isolation": body.get("isolation"),
        }
        try:
            JobSpec.from_dict(spec)  # well-formed, then allowed, then runnable (the scheduler checks it) and added
            self._allowed(req, spec)
            self.scheduler.add_job(spec)
        except InvalidJobSpec as exc:
            raise HttpError(400, "bad_request", str(exc)) from None
        return 202, {"ok": True, "_local_id": job_id}

    def _allowed(self, req: Request, spec: dict) -> None:
        """Raise 403 ``forbidden`` for a job or document naming a handler or
        store the node's policy does not allow."""
        try:
            self.policy.check(spec)
        except Forbidden as exc:
            report(
                "job_forbidden",
                logging.WARNING,
                method=req.method,
                path=req.path,
                user=req.user,
                field=exc.field,
                value=exc.value,
                why=exc.why,
            )
            raise HttpError(403, "forbidden", str(exc)) from None

    # ------------------------------------------------------------- _node
    def node_route(self, req: Request, seg: list[str]) -> tuple[int, Any]:
        what = seg[0] if seg else ""
        if what == "_stats":
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD")
            tree: Any = monitoring.stats_tree(self.scheduler.stats(), self._queue_stats())
            for name in seg[1:]:
                if not isinstance(tree, dict) or name not in tree:
                    raise HttpError(404, "not_found", "missing")
                tree = tree[name]
            return 200, tree
        if what == "_prometheus" and len(seg) == 1:
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD")
            return 200, Text(metrics.prometheus_text(self.scheduler.stats(), self._queue_stats() or []))
        if what == "_config":
            return self.config_route(req, seg[1:])
        raise HttpError(404, "not_found", "missing")

    def _section(self, section: str) -> dict[str, str]:
        if section in RUNTIME_KEYS and self.settings is not None:
            try:
                return {k: format_value(v) for k, v in self.settings.section(section).items()}
            except NoProc:  # no keeper in this tree (or it is restarting): ask the actors themselves
                pass
        if section == "replicator":
            settings = self.scheduler.settings()
            return {k: str(settings[k]) for k in REPLICATOR_KEYS if k in settings}
        if section in self.config:
            return {k: str(v) for k, v in self.config[section].items()}
        return {}

    def config_route(self, req: Request, seg: list[str]) -> tuple[int, Any]:
        """``[replicator]`` and ``[couch_jobs]`` read and written (the keeper and
        the actors running with it apply a change at once); a PUT answers the
        old value, as CouchDB does; other sections read-only."""
        if len(seg) > 2:
            raise HttpError(400, "bad_request", "Nesting too deep")
        if len(seg) < 2:
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD")
            if not seg:
                return 200, {s: self._section(s) for s in ("replicator", *self.config)}
            return 200, self._section(seg[0])
        section, key = seg
        if req.method in ("GET", "HEAD"):
            values = self._section(section)
            if key not in values:
                raise HttpError(404, "not_found", "unknown_config_value")
            return 200, values[key]
        if req.method != "PUT":
            raise not_allowed("GET,PUT")
        value = req.json()
        if not isinstance(value, str):
            raise HttpError(400, "bad_request", "config values must be strings")
        if section not in RUNTIME_KEYS:
            raise HttpError(403, "forbidden", f"[{section}] {key} can only be changed in the config file")
        try:  # a bad value never reaches the node
            parse_runtime_value(section, key, value)
        except ConfigError as exc:
            raise HttpError(400, "bad_request", str(exc)) from None
        persist = req.header(PERSIST_HEADER).strip().lower() != "false"
        if self.settings is not None:
            try:
                return 200, self._set(section, key, value, persist)
            except NoProc:  # no keeper in this tree
                pass
        if section == "couch_jobs":
            raise HttpError(503, "service_unavailable", "this node runs no settings keeper: nothing changed")
        old = self._section(section)[key]
        try:
            self.scheduler.set_setting(key, value)
        except InvalidSetting as exc:
            raise HttpError(400, "bad_request", str(exc)) from None
        return 200, old

    def _set(self, section: str, key: str, value: str, persist: bool) -> str:
        """Set a value in the keeper (and the file); answers the old value.

        Raises:
            NoProc: the node runs no keeper.
        """
        try:
            return format_value(self.settings.set(section, key, value, persist))
        except ConfigError as exc:
            raise HttpError(400, "bad_request", str(exc)) from None
        except ConfigWriteError as exc:
            raise HttpError(500, "file_error", f"{exc}: nothing changed") from None
        except (CallTimeout, CallFailed, NodeDown):
            raise HttpError(503, "service_unavailable", "the node's settings keeper did not answer") from None

    # ------------------------------------------------------------- _utils
    def utils_route(self, req: Request, seg: list[str]) -> tuple[int, Any]:
        """``GET /_utils/`` (or ``/_utils/index.html``): the status page, the
        jobs' and the documents' first ``limit`` entries after ``skip``;
        ``GET /_utils/jobs/{type}/{id}``: a queue job's page; ``POST
        /_utils/jobs/{type}/{id}/_retry|_cancel``: its buttons."""
        if seg[:1] == ["jobs"] and len(seg) in (3, 4):
            return self.job_page_route(req, seg[1], seg[2], seg[3] if len(seg) == 4 else None)
        if seg not in ([], ["index.html"]):
            raise HttpError(404, "not_found", "missing")
        if req.method not in ("GET", "HEAD"):
            raise not_allowed("GET,HEAD")
        try:
            limit, skip = monitoring.jobs_params(req.query)
        except monitoring.QueryParseError as exc:
            raise HttpError(400, "query_parse_error", str(exc)) from None
        jobs_total, page = self.scheduler.jobs_page(limit, skip)
        docs_error = None
        try:
            docs_total, docs = self._docs_list(None, limit, skip, None)
        except HttpError as exc:  # no store on this node
            docs_total, docs, docs_error = 0, [], exc.reason
        queue, queue_error, hosts, now = None, None, None, time.time()
        try:
            queue = queue_routes.queue_status(self._store(), now)
            hosts = queue_routes.hosts_status(self._store(), now)
        except HttpError as exc:  # no store on this node
            queue_error = exc.reason
        return 200, Html(
            status_page.render(
                node=self.node,
                version=VERSION,
                jobs_total=jobs_total,
                jobs=[monitoring.job_view(j) for j in page],
                docs_total=docs_total,
                docs=[monitoring.doc_view(d) for d in docs],
                skip=skip,
                limit=limit,
                docs_error=docs_error,
                now=now,
                queue=queue,
                queue_error=queue_error,
                throughput=None if self.sampler is None else self.sampler.snapshot(),
                hosts=hosts,
            )
        )

    def job_page_route(self, req: Request, job_type: str, job_id: str, action: str | None) -> tuple[int, Any]:
        """A queue job's page, or one of its buttons (a form post: see :meth:`check_form`),
        answered by a 303 to the page."""
        if action is None:
            if req.method not in ("GET", "HEAD"):
                raise not_allowed("GET,HEAD")
            view = queue_routes.job_view(self._store(), job_type, job_id)
            done = (req.query.get("done") or [None])[-1]
            if view is None:
                if "text/html" in req.header("Accept"):  # a browser (after a cancel, say): a page to read
                    return 404, Html(
                        job_page.missing_job_page(node=self.node, job_type=job_type, job_id=job_id, done=done)
                    )
                raise HttpError(404, "not_found", f"no job {job_id!r} of type {job_type!r}")
            return 200, FormHtml(
                job_page.job_page(
                    node=self.node,
                    job_type=job_type,
                    view=view,
                    csrf=self.auth.csrf_token(req.user),
                    done=done,
                    reserved=queue_routes.reserved(job_type),
                )
            )
        if action not in ("_retry", "_cancel"):
            raise HttpError(404, "not_found", "missing")
        if req.method != "POST":
            raise not_allowed("POST")
        form = self.check_form(req)
        was = form.get("was") if form.get("was") in ("finished", "unfinished") else None
        queue_routes.job_action(self._store(), job_type, job_id, action, was, HttpError)
        location = status_page.job_path(job_type, job_id) or "/_utils/"
        location += "?" + urlencode({"done": "retried" if action == "_retry" else "cancelled"})
        req.response_headers.append(("Location", location))
        return 303, Html(status_page.redirect_page(location))

    def check_form(self, req: Request) -> dict[str, str]:
        """The fields of a status page form, or 403 ``forbidden`` when the
        post may not come from the page: a browser that says it comes from
        another site (``Sec-Fetch-Site``: refused for every write by
        :func:`~actors.http.request.refuse_cross_site` before this), or a CSRF
        token missing, wrong, expired or made for other credentials. Checked
        before anything is read."""
        form: dict[str, str] = {}
        if req.content_type == "application/x-www-form-urlencoded":
            try:
                form = dict(parse_qsl(req.body().decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=10))
            except ValueError:
                raise HttpError(400, "bad_request", "a form of at most 10 fields is expected") from None
        if not self.auth.check_csrf(form.get("csrf"), req.user):
            raise HttpError(
                403,
                "forbidden",
                "the form's CSRF token is missing, wrong or expired: reload the job's page and try again",
            )
        return form
