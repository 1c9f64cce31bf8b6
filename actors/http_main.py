"""The HTTP process: ``python -m actors.http_main --admin-port P --port H``.

Started by :class:`actors.http_server.HttpServer`, which writes the rest
of its settings as one JSON object on stdin (so the session secret and the
admins' hashes never show on a command line): ``bind_address``, ``admins``
(name -> hash), ``secret`` (hex), ``session_timeout``, ``config``
(the start-time ``[couch_jobs]``, shown when the node's settings keeper
does not answer), ``node``, ``parent_pid``, ``store`` (the store URL
holding the documents). The process dies with its
parent (PR_SET_PDEATHSIG), binds, writes ``ready <port>`` (or ``error
<why>``) as one line on stdout, then serves with waitress until killed.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from supervision.gen_server import die_with_parent

#: waitress's own cap (the app answers CouchDB's 413 below it).
SERVER_MAX_BODY = 4 << 20
MAX_HEADER = 64 << 10
THREADS = 8


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    p = argparse.ArgumentParser(prog="python -m actors.http_main", description=__doc__.splitlines()[0])
    p.add_argument("--admin-port", type=int, required=True, help="the node's admin port")
    p.add_argument("--port", type=int, required=True, help="the HTTP port")
    args = p.parse_args(argv)
    settings = json.loads(sys.stdin.read() or "{}")
    parent = settings.get("parent_pid")
    if parent is not None and os.getppid() != parent:
        return 1  # the actor died before PR_SET_PDEATHSIG took hold
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s")

    import waitress

    import supervision
    from actors.auth import Auth
    from actors.config_server import ConfigClient
    from actors.http_api import App
    from actors.scheduler import SchedulerClient
    from actors.scheduler_sup import SCHEDULER_NAME

    out = os.fdopen(sys.stdout.fileno(), "w", buffering=1, closefd=False)
    try:
        client = supervision.connect(args.admin_port)
        client.node  # noqa: B018 - resolve the node supervisor once, before threads share the client
        auth = Auth(settings.get("admins") or {}, bytes.fromhex(settings["secret"]),
                    settings.get("session_timeout", 600))
        app = App(SchedulerClient(client, SCHEDULER_NAME), auth, settings.get("config") or {},
                  settings.get("node") or "local", store=settings.get("store"),
                  settings=ConfigClient(client))
        server = waitress.create_server(
            app, host=settings.get("bind_address", "127.0.0.1"), port=args.port, threads=THREADS,
            max_request_body_size=SERVER_MAX_BODY, max_request_header_size=MAX_HEADER,
            clear_untrusted_proxy_headers=True, ident="CouchDB (otpjobs)")
    except Exception as exc:  # noqa: BLE001 - tell the actor why, in one line
        out.write(f"error {type(exc).__name__}: {exc}\n".replace("\n", " ").rstrip() + "\n")
        return 1
    out.write(f"ready {server.effective_port}\n")
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
