"""The ``otpjobs`` console command (also ``python -m actors``).

    otpjobs node start [--store URL] [--config FILE] [--http-port N] [--port N] [--app MOD:CALLABLE]
                       [--workers TYPE=MOD:CALLABLE ...]
    otpjobs node stop [--port N]
    otpjobs node status [--port N]
    otpjobs worker [--concurrency N] [--async-concurrency N] [--max-attempts N] [--grace S] [--job-timeout S]
                   [--timeout S] [--cron TYPE=EXPR] [--keep-finished S] [--keep-failed S] [--port N] [--store URL]
                   TYPE=MOD:CALLABLE ...
    otpjobs workers list [--store URL]
    otpjobs jobs add TYPE JOB_ID [DATA_JSON] [--scheduled-time T | --delay S] [--store URL]
    otpjobs jobs list [TYPE] | remove TYPE JOB_ID | watch TYPE JOB_ID | result TYPE JOB_ID | show TYPE JOB_ID
                 | retry TYPE JOB_ID
    otpjobs jobs stats | schedules | unschedule TYPE | pause TYPE | resume TYPE [--store URL]
    otpjobs jobs prune [TYPE] [--older-than S] [--store URL]
    otpjobs types set-timeout TYPE SECONDS | clear-timeout TYPE | list [--store URL]
    otpjobs docs add DOC_ID BODY_JSON [--db DB] [--store URL]
    otpjobs docs get DOC_ID | remove DOC_ID | list [--limit N --skip N --states S] [--db DB] [--store URL]

Errors print one line to stderr and exit with status 2 (bad input) or 1
(failure); nothing is changed by a command that fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from typing import Any, Callable, Sequence

from actors import jsonable
from actors.settings import config as config_mod

from actors.cli_parser import build_parser


def cmd_worker(args: argparse.Namespace) -> int:
    from actors.workers import host

    if args.port is not None and not 1 <= args.port <= 65535:
        return _fail(f"--port must be a TCP port from 1 to 65535, not {args.port}", 2)
    cfg = config_mod.load(args.config, {("node", "store"): args.store, ("node", "log_level"): args.log_level})
    level = getattr(logging, cfg.node.log_level.upper())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s")
    return host.run(host.spec_from_config(cfg, args.assignments, args.cron, args), args.port, level)


def _config(args: argparse.Namespace) -> config_mod.Config:
    overrides = {
        ("node", "store"): getattr(args, "store", None),
        ("node", "port"): getattr(args, "port", None),
        ("node", "http_port"): getattr(args, "http_port", None),
        ("node", "log_level"): getattr(args, "log_level", None),
        ("node", "app"): getattr(args, "app", None),
    }
    return config_mod.load(args.config, overrides)


def _db(args: argparse.Namespace, existing: bool = False) -> Any:
    """The store of the command's config; with ``existing`` (commands that
    only read or remove), a SQLite file that does not exist is an error
    naming its absolute path instead of a new empty store."""
    import fdblayer
    from fdblayer.urls import parse_store_url

    url = _config(args).node.store
    if existing:
        parsed = parse_store_url(url)
        if parsed.scheme == "sqlite" and parsed.path and not os.path.exists(parsed.path):
            raise FileNotFoundError(
                f"no store at {os.path.abspath(parsed.path)} (from {url}); "
                "only node start, worker and commands that write create one"
            )
    return fdblayer.open(url)


def _job_type(text: str) -> str:
    """A CLI job type: the string as typed (``123`` stays a string), never empty."""
    from fdblayer.jobs.exceptions import InvalidArgument

    if not text:
        raise InvalidArgument("a job type must be a non-empty string")
    return text


# ----------------------------------------------------------------- node
def cmd_node_start(args: argparse.Namespace) -> int:
    from actors.node import root as node

    cfg = _config(args)
    logging.basicConfig(
        level=getattr(logging, cfg.node.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s",
    )
    if args.workers:
        from actors.handlers import parse_assignments

        cfg.workers.update(parse_assignments(args.workers))
    return node.run(cfg)


def cmd_node_stop(args: argparse.Namespace) -> int:
    """SIGTERM to the foreground command that runs the node (it drains and
    stops it), if it is still the process the runtime file recorded (pid
    and start time); else the node is stopped from here."""
    from supervision.procs import signal_process
    from supervision.runtime import read_runtime, recorded_alive
    from supervision.system import port_open, stop_node

    port = _config(args).node.port
    info = read_runtime(port) or {}
    owner = info.get("owner")
    if (
        owner != os.getpid()
        and recorded_alive(info, "owner")
        and signal_process(owner, info.get("owner_start"), signal.SIGTERM)
    ):
        deadline = time.monotonic() + 60
        while (recorded_alive(info, "owner") or port_open(port)) and time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"node on port {port} stopped")
        return 0
    if stop_node(port):
        print(f"node on port {port} stopped")
        return 0
    print(f"no node on port {port}", file=sys.stderr)
    return 1


def cmd_node_status(args: argparse.Namespace) -> int:
    from supervision import NodeDown, connect

    port = _config(args).node.port
    try:
        client = connect(port)
        children = client.which_children(client.node)
        pid = client.get_pid(client.node)
    except NodeDown as exc:
        print(json.dumps({"port": port, "running": False, "reason": str(exc)}))
        return 1
    print(
        json.dumps(
            {
                "port": port,
                "running": True,
                "supervisor_pid": pid,
                "children": [{"id": str(c.id), "pid": c.pid, "type": c.type} for c in children],
            }
        )
    )
    return 0


# ----------------------------------------------------------------- jobs
def cmd_jobs_add(args: argparse.Namespace) -> int:
    """Add (or resubmit) a job as ``jobs.enqueue`` does: a type with no
    activity timeout yet is declared with the default (30 s)."""
    from actors.workers import client

    text = _data_text(args.data)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SystemExit(_fail(f"job data is not JSON: {exc}", 2)) from None
    if not isinstance(data, dict):
        raise SystemExit(_fail(f"job data must be a JSON object, not {type(data).__name__}", 2))
    client.enqueue(
        _db(args), _job_type(args.type), data, id=args.job_id, delay=args.delay, at=args.scheduled_time or None
    )
    print(f"added {args.type}/{args.job_id}")
    return 0


def _data_text(spec: str) -> str:
    """Job data given as JSON text, ``@file`` (its contents) or ``-`` (standard input)."""
    if spec == "-":
        return sys.stdin.read()
    if spec.startswith("@"):
        try:
            with open(spec[1:], encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as exc:  # a directory, no permission, not UTF-8 text
            from fdblayer.jobs.exceptions import InvalidArgument

            raise InvalidArgument(f"job data file {spec[1:]!r}: {exc}") from None
    return spec


def cmd_jobs_result(args: argparse.Namespace) -> int:
    """Wait for a pool job's outcome: print its result (exit 0) or its error (exit 1)."""
    from actors.workers import client

    try:
        value = client.result(_db(args, existing=True), _job_type(args.type), args.job_id, timeout=args.timeout)
    except client.JobFailed as exc:
        # stdout: one JSON line (the traceback among its fields); stderr: the traceback as Python prints it.
        print(
            json.dumps(
                {
                    "error": exc.error_type,
                    "message": exc.error_message,
                    "attempts": exc.attempts,
                    "traceback": exc.traceback,
                }
            )
        )
        if exc.traceback:
            print(exc.traceback.rstrip("\n"), file=sys.stderr)
        return _fail(exc.message, 1)
    except TimeoutError as exc:
        return _fail(str(exc), 1)
    print(jsonable.dumps(value))
    return 0


def cmd_jobs_prune(args: argparse.Namespace) -> int:
    """Remove finished pool jobs past their retention: ``--older-than S``,
    else the config's ``[worker] keep_finished`` and ``keep_failed``."""
    from actors.workers import client
    from fdblayer.jobs.work_record import FAILED, SUCCEEDED

    job_type = None if args.type is None else _job_type(args.type)
    if args.older_than is not None:
        keep = {SUCCEEDED: args.older_than, FAILED: args.older_than}
    else:
        worker = _config(args).worker
        keep = {SUCCEEDED: worker.keep_finished or None, FAILED: worker.keep_failed or None}
    removed = client.prune_kept(_db(args, existing=True), job_type, keep)
    print(json.dumps({"pruned": removed, "type": job_type}))
    return 0


def cmd_jobs_pause(args: argparse.Namespace) -> int:
    """Pause (``jobs pause``) or resume (``jobs resume``) a type; exit 1 for an unknown type."""
    from actors.workers import client
    from fdblayer.jobs.exceptions import NotFound

    job_type = _job_type(args.type)
    pausing = args.cmd == "pause"
    try:
        was = (client.pause if pausing else client.resume)(_db(args, existing=True), job_type)
    except NotFound as exc:
        return _fail(exc.message, 1)
    now = "paused" if pausing else "running"
    print(f"type {job_type!r} {'was already' if was == pausing else 'is now'} {now}")
    return 0


def cmd_jobs_show(args: argparse.Namespace) -> int:
    """Print one job whole (``GET /_jobs/{type}/{id}``'s view) as JSON; exit 1 if there is none."""
    from fdblayer.jobs import overview
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    job_type = _job_type(args.type)
    view = overview.job_view(_db(args, existing=True), DEFAULT_LAYOUT, job_type, args.job_id)
    if view is None:
        return _fail(f"no job {args.job_id!r} of type {job_type!r}", 1)
    print(jsonable.dumps(dict(view, type=job_type), indent=2))
    return 0


def cmd_jobs_retry(args: argparse.Namespace) -> int:
    """Put a finished (or failed) job back in the queue with a fresh attempt count."""
    from actors.workers import client
    from fdblayer.jobs import overview
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    db = _db(args, existing=True)
    job_type = _job_type(args.type)
    view = overview.job_view(db, DEFAULT_LAYOUT, job_type, args.job_id)
    if view is None:
        return _fail(f"no job {args.job_id!r} of type {job_type!r}", 1)
    if view["state"] != "finished":
        return _fail(f"job {args.job_id!r} is {view['state']}: only a finished job is retried", 1)
    client.enqueue(db, job_type, view["data"], id=args.job_id, max_attempts=view["max_attempts"])
    print(f"retried {args.type}/{args.job_id}")
    return 0


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from fdblayer import jobs

    job_type = _job_type(args.type) if args.type is not None else None
    for info in jobs.get_jobs(_db(args, existing=True), job_type):
        print(jsonable.dumps(_info_dict(info)))
    return 0


def _info_dict(info: Any) -> dict:
    fields = getattr(info, "__dataclass_fields__", None)
    if fields:
        return {k: getattr(info, k) for k in fields}
    return dict(info._asdict()) if hasattr(info, "_asdict") else {"job": repr(info)}


def cmd_jobs_remove(args: argparse.Namespace) -> int:
    from fdblayer import jobs

    jobs.remove(_db(args, existing=True), _job_type(args.type), args.job_id)
    print(f"removed {args.type}/{args.job_id}")
    return 0


def cmd_jobs_watch(args: argparse.Namespace) -> int:
    from fdblayer.jobs.validate import check_timeout

    timeout = check_timeout(args.timeout, "--timeout")  # nan, negative: refused; a timeout of years: forever
    db = _db(args, existing=True)
    job_type = _job_type(args.type)
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    while True:
        state, watch = _state_and_watch(db, job_type, args.job_id)
        if state != last:
            print(json.dumps({"type": args.type, "id": args.job_id, "state": str(getattr(state, "value", state))}))
            sys.stdout.flush()
            last = state
        if str(getattr(state, "value", state)) == "finished":
            watch.cancel()
            return 0
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            watch.cancel()
            return 1
        watch.wait(left)
        watch.cancel()


def _state_and_watch(db: Any, job_type: Any, job_id: str) -> tuple[Any, Any]:
    """The job's state and a watch of its row, from one transaction: a change
    between the read and the watch cannot be missed."""
    from fdblayer.jobs import api
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    tr = db.create_transaction()
    state = api.get_job_state(tr, job_type, job_id)
    watch = tr.watch(DEFAULT_LAYOUT.data_key(job_type, job_id))
    tr.commit()
    return state, watch


# ---------------------------------------------------------------- types
def cmd_types_set_timeout(args: argparse.Namespace) -> int:
    from fdblayer import jobs

    jobs.set_type_timeout(_db(args), _job_type(args.type), args.seconds)
    print(f"type {args.type}: timeout {args.seconds}s")
    return 0


def cmd_types_clear_timeout(args: argparse.Namespace) -> int:
    from fdblayer import jobs

    from fdblayer.docs import DOCS_TYPE

    job_type = _job_type(args.type)
    if job_type == DOCS_TYPE:
        return _fail(f"type {job_type!r} is reserved (the nodes' ownership of documents); it keeps its timeout", 2)
    db = _db(args, existing=True)
    if jobs.get_type_timeout(db, job_type) is None:
        return _fail(f"no job type {job_type!r} (it has no timeout to clear)", 1)
    jobs.clear_type_timeout(db, job_type)
    print(f"type {args.type}: timeout cleared")
    return 0


def cmd_jobs_stats(args: argparse.Namespace) -> int:
    """One JSON line per type: its timeout and counts (what ``GET /_jobs`` shows)."""
    from fdblayer.jobs import overview
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    for entry in overview.types_overview(_db(args, existing=True), DEFAULT_LAYOUT, time.time()):
        print(jsonable.dumps(entry))
    return 0


def cmd_jobs_schedules(args: argparse.Namespace) -> int:
    """One JSON line per periodic schedule in the store: type, cron, last and next tick."""
    from actors.workers import client

    for entry in client.schedules(_db(args, existing=True)):
        print(
            jsonable.dumps(
                {
                    "type": entry["type"],
                    "cron": entry["cron"],
                    "last_tick": entry["last_tick"],
                    "last_tick_utc": _utc(entry["last_tick"]),
                    "next_tick": entry["next_tick"],
                    "next_tick_utc": _utc(entry["next_tick"]),
                    "data": entry["data"],
                }
            )
        )
    return 0


def _utc(epoch: Any) -> Any:
    """Seconds since the epoch as ISO 8601 UTC (None stays None)."""
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def cmd_jobs_unschedule(args: argparse.Namespace) -> int:
    """Remove a type's periodic schedule from the store (its jobs stay)."""
    from actors.workers import client

    job_type = _job_type(args.type)
    if not client.unschedule(_db(args, existing=True), job_type):
        return _fail(f"job type {job_type!r} has no periodic schedule", 1)
    print(f"unscheduled {args.type}")
    return 0


def cmd_workers_list(args: argparse.Namespace) -> int:
    """One JSON line per worker host: its last heartbeat (what ``GET /_workers`` shows)."""
    from fdblayer.jobs import hosts
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    for entry in hosts.list_hosts(_db(args, existing=True), DEFAULT_LAYOUT, time.time()):
        print(jsonable.dumps(entry))
    return 0


def cmd_types_list(args: argparse.Namespace) -> int:
    from fdblayer import jobs

    db = _db(args, existing=True)
    for job_type in jobs.get_types(db):
        print(json.dumps({"type": job_type, "timeout": jobs.get_type_timeout(db, job_type)}))
    return 0


# ----------------------------------------------------------------- docs
def cmd_docs_add(args: argparse.Namespace) -> int:
    from actors import docs

    try:
        body = json.loads(args.body)
    except ValueError as exc:
        raise SystemExit(_fail(f"document is not JSON: {exc}", 2)) from None
    rev = docs.put(_db(args), args.db, args.doc_id, body)
    print(json.dumps({"ok": True, "id": args.doc_id, "rev": rev}))
    return 0


def cmd_docs_get(args: argparse.Namespace) -> int:
    from actors import docs

    doc = docs.get(_db(args, existing=True), args.db, args.doc_id)
    print(jsonable.dumps(dict(docs.view(doc), rev=doc.rev, body=doc.body)))
    return 0


def cmd_docs_remove(args: argparse.Namespace) -> int:
    from actors import docs

    rev = docs.delete(_db(args, existing=True), args.db, args.doc_id)
    print(json.dumps({"ok": True, "id": args.doc_id, "rev": rev}))
    return 0


def cmd_docs_list(args: argparse.Namespace) -> int:
    from actors import docs

    states = None if args.states is None else [s.strip() for s in args.states.split(",") if s.strip()]
    total, page = docs.list_docs(_db(args, existing=True), args.db, limit=args.limit, skip=args.skip, states=states)
    for doc in page:
        print(jsonable.dumps(docs.view(doc)))
    print(json.dumps({"total_rows": total, "offset": args.skip}), file=sys.stderr)
    return 0


COMMANDS: dict[tuple[str, str], Callable[[argparse.Namespace], int]] = {
    ("worker", "run"): cmd_worker,
    ("node", "start"): cmd_node_start,
    ("node", "stop"): cmd_node_stop,
    ("node", "status"): cmd_node_status,
    ("jobs", "add"): cmd_jobs_add,
    ("jobs", "list"): cmd_jobs_list,
    ("jobs", "remove"): cmd_jobs_remove,
    ("jobs", "watch"): cmd_jobs_watch,
    ("jobs", "stats"): cmd_jobs_stats,
    ("jobs", "schedules"): cmd_jobs_schedules,
    ("jobs", "unschedule"): cmd_jobs_unschedule,
    ("jobs", "result"): cmd_jobs_result,
    ("jobs", "show"): cmd_jobs_show,
    ("jobs", "pause"): cmd_jobs_pause,
    ("jobs", "prune"): cmd_jobs_prune,
    ("jobs", "resume"): cmd_jobs_pause,
    ("jobs", "retry"): cmd_jobs_retry,
    ("workers", "list"): cmd_workers_list,
    ("types", "set-timeout"): cmd_types_set_timeout,
    ("types", "clear-timeout"): cmd_types_clear_timeout,
    ("types", "list"): cmd_types_list,
    ("docs", "add"): cmd_docs_add,
    ("docs", "get"): cmd_docs_get,
    ("docs", "remove"): cmd_docs_remove,
    ("docs", "list"): cmd_docs_list,
}


def _fail(message: str, status: int) -> int:
    print(f"otpjobs: error: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console command; returns the exit status."""
    args = build_parser().parse_args(argv)
    from fdblayer.exceptions import StoreError
    from fdblayer.jobs.exceptions import JobsError
    from supervision import SupervisionError
    from supervision.exceptions import RuntimeDirError

    from actors.node.app import AppError

    try:
        return COMMANDS[(args.group, args.cmd)](args)
    except (config_mod.ConfigError, config_mod.ConfigFileError, FileNotFoundError, AppError, RuntimeDirError) as exc:
        return _fail(str(exc), 2)
    except JobsError as exc:
        return _fail(
            str(exc),
            2
            if type(exc).__name__ in ("InvalidArgument", "EncodingError", "NoTypeTimeout", "Conflict", "HandlerError")
            else 1,
        )
    except (StoreError, SupervisionError, ValueError) as exc:
        return _fail(str(exc), 1)
