"""The command line's grammar: every verb, its arguments and their help
(:func:`build_parser`); the values are checked by :mod:`actors.cli_args`
and the verbs run by :mod:`actors.cli`."""

from __future__ import annotations

import argparse
from typing import Any

from actors.cli_args import DEFAULT_PORT, _epoch, _port_arg, _seconds, _store_arg, _timeout_seconds

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="otpjobs", description="Durable background jobs under OTP-style supervision.")
    groups = parser.add_subparsers(dest="group", required=True, metavar="{node,worker,workers,jobs,types,docs}")

    node = groups.add_parser("node", help="run and control a node").add_subparsers(dest="cmd", required=True)
    start = node.add_parser("start", help="run a node in the foreground")
    _store_arg(start)
    start.add_argument("--http-port", type=int, help="HTTP monitoring port (default 5984)")
    start.add_argument("--port", type=int, help=f"admin port (default {DEFAULT_PORT})")
    start.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    start.add_argument(
        "--workers",
        action="append",
        metavar="TYPE=package.module:callable",
        default=[],
        help="run a worker pool for these types in the node (also [workers] in the config file)",
    )
    start.add_argument(
        "--app",
        metavar="package.module:callable",
        help="start your own child specs (returned by the callable) under the node's root, "
        "after the built-in subsystems (also [node] app in the config file)",
    )
    _port_arg(node.add_parser("stop", help="stop the node on a port"))
    _port_arg(node.add_parser("status", help="show whether a node runs and its children"))

    _worker_parser(groups)
    workers = groups.add_parser("workers", help="worker hosts serving the store").add_subparsers(
        dest="cmd", required=True
    )
    _store_arg(workers.add_parser("list", help="each host's last heartbeat: types, busy workers, running jobs"))
    jobs = groups.add_parser("jobs", help="add, list and remove jobs").add_subparsers(dest="cmd", required=True)
    add = jobs.add_parser("add", help="add (or resubmit) a job")
    add.add_argument("type")
    add.add_argument("job_id")
    add.add_argument("data", nargs="?", default="{}", help="job data: JSON, @file, or - for standard input")
    when = add.add_mutually_exclusive_group()
    when.add_argument("--scheduled-time", type=_epoch, default=0, help="due time, whole seconds since the epoch")
    when.add_argument("--delay", type=_seconds, default=None, help="due in this many seconds")
    _store_arg(add)
    lst = jobs.add_parser("list", help="list jobs (of one type)")
    lst.add_argument("type", nargs="?")
    _store_arg(lst)
    rm = jobs.add_parser("remove", help="remove a job")
    rm.add_argument("type")
    rm.add_argument("job_id")
    _store_arg(rm)
    res = jobs.add_parser("result", help="wait for a pool job's result (exit 1 if it failed for good)")
    res.add_argument("type")
    res.add_argument("job_id")
    res.add_argument("--timeout", type=_seconds, default=None)
    _store_arg(res)
    show = jobs.add_parser(
        "show",
        help="one job whole, as GET /_jobs/{type}/{id}: state, attempts, progress, "
        "result, the error of every failed attempt",
    )
    show.add_argument("type")
    show.add_argument("job_id")
    _store_arg(show)
    rt = jobs.add_parser("retry", help="put a finished or failed job back in the queue")
    rt.add_argument("type")
    rt.add_argument("job_id")
    _store_arg(rt)
    _store_arg(jobs.add_parser("stats", help="per type: timeout and counts of each state (as GET /_jobs)"))
    for verb, what in (
        ("pause", "no host starts the type's jobs until it is resumed (running ones finish)"),
        ("resume", "hosts start the paused type's jobs again"),
    ):
        p = jobs.add_parser(verb, help=what)
        p.add_argument("type")
        _store_arg(p)
    prune = jobs.add_parser(
        "prune",
        help="remove finished and failed pool jobs past their retention now "
        "(hosts do it by themselves; never a pending or running job)",
    )
    prune.add_argument("type", nargs="?", help="only this type (default: every type)")
    prune.add_argument(
        "--older-than",
        type=_seconds,
        default=None,
        help="seconds since a job ended (0: every finished pool job; default: the config's "
        "[worker] keep_finished and keep_failed, a day and a week)",
    )
    _store_arg(prune)
    _store_arg(
        jobs.add_parser("schedules", help="the periodic schedules kept in the store: type, cron, last and next tick")
    )
    unsched = jobs.add_parser("unschedule", help="remove a type's periodic schedule (its jobs stay)")
    unsched.add_argument("type")
    _store_arg(unsched)
    watch = jobs.add_parser("watch", help="print a job's state changes until it finishes")
    watch.add_argument("type")
    watch.add_argument("job_id")
    watch.add_argument("--timeout", type=float, default=None)
    _store_arg(watch)

    types = groups.add_parser("types", help="job types and their activity timeouts").add_subparsers(
        dest="cmd", required=True
    )
    st = types.add_parser("set-timeout", help="create a type / set its activity timeout")
    st.add_argument("type")
    st.add_argument("seconds", type=_timeout_seconds)
    _store_arg(st)
    ct = types.add_parser("clear-timeout", help="remove a type's timeout")
    ct.add_argument("type")
    _store_arg(ct)
    _store_arg(types.add_parser("list", help="list types with their timeouts"))

    docs = groups.add_parser("docs", help="permanent jobs (replicator documents)").add_subparsers(
        dest="cmd", required=True
    )
    dadd = docs.add_parser("add", help="create or replace a document (a node adopts and runs it)")
    dadd.add_argument("doc_id")
    dadd.add_argument("body", help='the document as JSON: {"source","target","continuous"} or {"handler","options"}')
    for name, helptext in (("get", "show a document and its state"), ("remove", "delete a document")):
        dp = docs.add_parser(name, help=helptext)
        dp.add_argument("doc_id")
        dp.add_argument("--db", default="_replicator", help="database (default _replicator)")
        _store_arg(dp)
    dadd.add_argument("--db", default="_replicator", help="database (default _replicator)")
    _store_arg(dadd)
    dlist = docs.add_parser("list", help="list documents as _scheduler/docs does")
    dlist.add_argument("--db", default=None, help="only this database")
    dlist.add_argument("--limit", type=int, default=None)
    dlist.add_argument("--skip", type=int, default=0)
    dlist.add_argument("--states", default=None, help="comma-separated states")
    _store_arg(dlist)
    return parser


def _worker_parser(groups: Any) -> None:
    w = groups.add_parser(
        "worker",
        help="run a worker host: Python functions as queue jobs",
        description="Run a worker host in the foreground: a pool of worker processes running "
        "package.module:callable per job type, until SIGTERM or Ctrl-C.",
    )
    w.set_defaults(cmd="run")
    w.add_argument(
        "assignments",
        nargs="*",
        metavar="TYPE=package.module:callable",
        help="the handler of each job type (also [workers] in the config file)",
    )
    _store_arg(w)
    w.add_argument("--concurrency", "-c", type=int, help="worker processes (default 4)")
    w.add_argument(
        "--async-concurrency", type=int, help="runs of async def handlers each worker awaits at once (default 100)"
    )
    w.add_argument("--max-attempts", type=int, help="attempts per job unless the job says (default 3)")
    w.add_argument(
        "--grace",
        type=_seconds,
        help="seconds running handlers get on SIGTERM, and past their time limit, before they are stopped (default 30)",
    )
    w.add_argument(
        "--job-timeout",
        type=_seconds,
        help="seconds a run may take unless its job or handler says (default 0: no limit)",
    )
    w.add_argument(
        "--keep-finished",
        type=_seconds,
        help="seconds a succeeded job is kept once finished, then pruned (default a day; 0: for ever)",
    )
    w.add_argument(
        "--keep-failed",
        type=_seconds,
        help="seconds a job that failed for good is kept, then pruned (default a week; 0: for ever)",
    )
    w.add_argument("--timeout", type=_timeout_seconds, help="activity timeout of a type that has none (default 30 s)")
    w.add_argument(
        "--cron",
        action="append",
        default=[],
        metavar="TYPE=EXPR",
        help="a periodic schedule of a type, e.g. 'report=*/5 * * * *' (repeat it; also [periodic])",
    )
    w.add_argument("--port", type=int, help="the host's admin port (default: a free one)")
    w.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
