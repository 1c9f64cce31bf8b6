"""The HTTP process: ``python -m actors.http.main --admin-port P --port H``.

Started by :class:`actors.http.server.HttpServer`, which writes the rest
of its settings as one JSON object on stdin (so the session secret and the
admins' hashes never show on a command line): ``bind_address``, ``admins``
(name -> hash), ``secret`` (hex), ``session_timeout``, ``config``
(the start-time ``[couch_jobs]``, shown when the node's settings keeper
does not answer), ``node``, ``parent_pid``, ``store`` (the store URL
holding the documents), ``policy`` (the handlers and stores jobs may
name, :meth:`actors.settings.policy.JobPolicy.to_dict`), ``sample_interval``
(seconds between two readings of the queue's counters for the status
page's charts, :mod:`actors.http.throughput`; default 60). The process dies with its
parent (PR_SET_PDEATHSIG), binds, writes ``ready <port>`` (or ``error
<why>``) as one line on stdout, then serves with waitress until killed.

waitress refuses some requests before the app sees them (a malformed
request line or header, a bad Content-Length or chunk, a lower-case
method, a body over :data:`SERVER_MAX_BODY`, a header block over
:data:`MAX_HEADER`, a Transfer-Encoding other than chunked); its channel
here (:class:`CouchChannel`) answers those as CouchDB does, JSON
``{"error", "reason"}`` (:data:`WAITRESS_ERRORS`), and refuses at once a
chunk that announces more than the cap (waitress would wait for it).

Idle and slow clients cannot keep the others out (:mod:`actors.http.slow_clients`):
``poll()`` rather than ``select()``, up to
:data:`~actors.http.slow_clients.CONNECTION_LIMIT` connections (the soft
``RLIMIT_NOFILE`` raised for them), a request head must be in within
:data:`~actors.http.slow_clients.HEAD_TIMEOUT` seconds, and at the limit
newcomers take the places of the connections that waited longest for one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from waitress.parser import HTTPRequestParser
from waitress.receiver import ChunkedReceiver
from waitress.server import BaseWSGIServer
from waitress.task import ErrorTask
from waitress.utilities import RequestEntityTooLarge

from actors.http.slow_clients import SlowClientChannel, accept_in_batches, server_adjustments
from supervision.gen_server import die_with_parent
from supervision.owner import ignore_stop_signals

#: waitress's own cap (the app answers CouchDB's 413 below it).
SERVER_MAX_BODY = 4 << 20
MAX_HEADER = 64 << 10
THREADS = 8

#: The CouchDB error (and, when waitress's own text says less, the reason) of
#: each status waitress answers by itself; any other is ``unknown_error``.
WAITRESS_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("bad_request", None),
    413: ("too_large", "the request entity is too large"),
    431: ("too_large", "the request header fields are too large"),
    500: ("unknown_error", None),
    501: ("not_implemented", None),
}


class CouchErrorTask(ErrorTask):
    """A request waitress refused, answered as CouchDB does: its status and
    ``{"error", "reason"}`` JSON (the connection is closed after it)."""

    def execute(self) -> None:
        e = self.request.error
        error, reason = WAITRESS_ERRORS.get(e.code, ("unknown_error", None))
        body = (json.dumps({"error": error, "reason": reason or str(e.body)}, separators=(",", ":")) + "\n").encode()
        self.status = f"{e.code} {e.reason}"
        self.response_headers.extend(
            [
                ("Content-Type", "application/json"),
                ("Cache-Control", "must-revalidate"),
                ("X-Content-Type-Options", "nosniff"),
            ]
        )
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class CouchRequestParser(HTTPRequestParser):
    """waitress's parser, plus: a chunk whose announced size would take the body
    past ``max_request_body_size`` is a 413 as soon as its size line is read
    (waitress counts only the bytes received, so it waited for them)."""

    def received(self, data: bytes) -> int:
        consumed = super().received(data)
        body = self.body_rcv
        if (
            not self.completed
            and isinstance(body, ChunkedReceiver)
            and len(body) + body.chunk_remainder >= self.adj.max_request_body_size
        ):
            self.error = RequestEntityTooLarge(f"exceeds max_body of {self.adj.max_request_body_size}")
            self.completed = True
        return consumed


class CouchChannel(SlowClientChannel):
    """waitress's connection, with CouchDB-shaped refusals and a deadline for each request head."""

    error_task_class = CouchErrorTask
    parser_class = CouchRequestParser


def use_couch_channels(server: Any) -> None:
    """Make every listening socket of a ``waitress.create_server`` result open
    :class:`CouchChannel` connections, several at a turn of the loop (one socket,
    or several under a ``MultiSocketServer`` when the host resolves to more than
    one address)."""
    servers = [server] if isinstance(server, BaseWSGIServer) else list(server.map.values())
    for each in servers:
        if isinstance(each, BaseWSGIServer):
            each.channel_class = CouchChannel
            accept_in_batches(each)


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    ignore_stop_signals()  # one of the node's processes: its actor ends it (SIGKILL), the owner the node
    p = argparse.ArgumentParser(prog="python -m actors.http.main", description=__doc__.splitlines()[0])
    p.add_argument("--admin-port", type=int, required=True, help="the node's admin port")
    p.add_argument("--port", type=int, required=True, help="the HTTP port")
    args = p.parse_args(argv)
    settings = json.loads(sys.stdin.read() or "{}")
    parent = settings.get("parent_pid")
    if parent is not None and os.getppid() != parent:
        return 1  # the actor died before PR_SET_PDEATHSIG took hold
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s",
    )

    import waitress

    import supervision
    from actors.http.auth import Auth
    from actors.settings.keeper import ConfigClient
    from actors.http.api import App
    from actors.http.throughput import INTERVAL, Sampler, read_counters
    from actors.settings.policy import JobPolicy
    from actors.scheduler.client import SchedulerClient
    from actors.names import SCHEDULER as SCHEDULER_NAME

    out = os.fdopen(sys.stdout.fileno(), "w", buffering=1, closefd=False)
    try:
        client = supervision.connect(args.admin_port)
        client.node  # noqa: B018 - resolve the node supervisor once, before threads share the client
        auth = Auth(
            settings.get("admins") or {}, bytes.fromhex(settings["secret"]), settings.get("session_timeout", 600)
        )
        app = App(
            SchedulerClient(client, SCHEDULER_NAME),
            auth,
            settings.get("config") or {},
            settings.get("node") or "local",
            store=settings.get("store"),
            settings=ConfigClient(client),
            policy=None if settings.get("policy") is None else JobPolicy.from_dict(settings["policy"]),
        )
        if app.store is not None:  # the status page's charts: the queue's counters, read from now on
            app.sampler = Sampler(
                lambda: read_counters(app._store()), float(settings.get("sample_interval") or INTERVAL)
            )
        server = waitress.create_server(
            app,
            host=settings.get("bind_address", "127.0.0.1"),
            port=args.port,
            threads=THREADS,
            max_request_body_size=SERVER_MAX_BODY,
            max_request_header_size=MAX_HEADER,
            clear_untrusted_proxy_headers=True,
            ident="CouchDB (otpjobs)",
            **server_adjustments(),
        )
        use_couch_channels(server)
    except Exception as exc:  # noqa: BLE001 - tell the actor why, in one line
        out.write(f"error {type(exc).__name__}: {exc}\n".replace("\n", " ").rstrip() + "\n")
        return 1
    out.write(f"ready {server.effective_port}\n")
    if app.sampler is not None:
        app.sampler.start()
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
