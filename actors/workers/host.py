"""Running a worker host in the foreground (``otpjobs worker``), or a node's pool.

Principle: everything that can be wrong with a host's arguments (a handler
that cannot be imported, a bad cron expression, a store that cannot be
opened) is found before anything forks and reported in one line; then
the host is a node like any other (its own actor system on a loopback
port, a supervision tree, structured log lines) that stops cleanly on
SIGTERM or Ctrl-C: it claims no new job, puts the claimed ones that have
not started back in the queue at once, gives running handlers ``grace``
seconds, then stops.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any, Optional

from supervision import Client
from supervision.owner import catching_stops, finishing_stop
from supervision.runtime import runtime_dir
from supervision.system import start_node, stop_node, wait_for_stop

from actors import names
from actors.handlers import add_cwd_to_path, resolve
from actors.workers.protocol import Drain
from actors.workers.runs import DEFAULT_BACKOFF, worker_default
from actors.workers.sup import workers_children
from fdblayer.urls import redact_url

__all__ = ["HostSpec", "spec_from_config", "check", "prepare", "host_name", "host_args", "run", "drain"]

log = logging.getLogger("otpjobs.workers")

#: The root flags of a worker host's node.
HOST_FLAGS = {"strategy": "one_for_one", "intensity": 3, "period": 10}


class HostSpec:
    """What a host serves: ``types`` (type -> handler path), ``periodic`` (type
    -> cron), concurrency (worker processes; each also awaits up to
    ``async_concurrency`` runs of ``async def`` handlers at once), default
    max attempts, type timeout, grace,
    default time limit of a run (``job_timeout``, 0: none) and the seconds
    finished and failed jobs are kept (``keep_finished``, ``keep_failed``,
    0: for ever)."""

    def __init__(
        self,
        store: str,
        types: dict,
        *,
        periodic: Optional[dict] = None,
        concurrency: int = worker_default("concurrency"),
        max_attempts: int = worker_default("max_attempts"),
        type_timeout: float = worker_default("type_timeout"),
        grace: float = worker_default("grace"),
        job_timeout: float = worker_default("job_timeout"),
        backoff: tuple = DEFAULT_BACKOFF,
        keep_finished: float = worker_default("keep_finished"),
        keep_failed: float = worker_default("keep_failed"),
        async_concurrency: int = worker_default("async_concurrency"),
    ) -> None:
        self.store = store
        self.types = dict(types)
        self.periodic = dict(periodic or {})
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.max_attempts = max_attempts
        self.type_timeout = type_timeout
        self.grace = grace
        self.job_timeout = job_timeout
        self.backoff = backoff
        self.keep_finished = keep_finished
        self.keep_failed = keep_failed


def spec_from_config(cfg: Any, assignments: list, crons: list, args: Any = None) -> HostSpec:
    """The host a config file (``[workers]``, ``[periodic]``, ``[worker]``, ``[node] store``)
    and a command line (``TYPE=handler`` items, ``--cron`` items, options) ask for;
    the command line wins."""
    from actors.handlers import parse_assignments

    types = dict(cfg.workers, **parse_assignments(assignments))
    periodic = dict(cfg.periodic, **parse_assignments(crons))

    def pick(name: str, key: str) -> Any:
        value = getattr(args, name, None)
        return getattr(cfg.worker, key) if value is None else value

    return HostSpec(
        cfg.node.store,
        types,
        periodic=periodic,
        concurrency=pick("concurrency", "concurrency"),
        max_attempts=pick("max_attempts", "max_attempts"),
        type_timeout=pick("timeout", "type_timeout"),
        grace=pick("grace", "grace"),
        job_timeout=pick("job_timeout", "job_timeout"),
        keep_finished=pick("keep_finished", "keep_finished"),
        keep_failed=pick("keep_failed", "keep_failed"),
        async_concurrency=pick("async_concurrency", "async_concurrency"),
    )


def check(spec: HostSpec) -> None:
    """Check everything about a host that needs no store, before a store
    file or a process is created: imports every handler (with the current
    directory on ``sys.path``), reads every cron expression.

    Raises:
        HandlerError: a handler cannot be used.
        InvalidArgument: a bad type, count or cron expression, or a type
            reserved for the nodes' documents.
    """
    from fdblayer.docs import DOCS_TYPE
    from fdblayer.jobs.exceptions import InvalidArgument

    from actors.settings.schema import known
    from actors.workers.schedule import check_cron

    if not spec.types:
        raise InvalidArgument("a worker host needs at least one TYPE=package.module:callable")
    for key, value in (
        ("concurrency", spec.concurrency),
        ("async_concurrency", spec.async_concurrency),
        ("max_attempts", spec.max_attempts),
    ):
        setting = known("worker", key)  # the bounds of the [worker] setting it overrides
        if value < setting.low or (setting.high is not None and value > setting.high):
            raise InvalidArgument(f"{key.replace('_', ' ')} must be from {setting.low} to {setting.high}, not {value}")
    unknown = set(spec.periodic) - set(spec.types)
    if unknown:
        raise InvalidArgument(f"periodic type(s) {sorted(unknown)} have no handler on this host")
    if DOCS_TYPE in spec.types:
        raise InvalidArgument(f"job type {DOCS_TYPE!r} is reserved for the nodes' documents")
    for cron in spec.periodic.values():
        check_cron(cron)
    add_cwd_to_path()
    for path in spec.types.values():
        resolve(path)


def prepare(spec: HostSpec) -> None:
    """Check (:func:`check`) and set up everything before the host forks:
    gives each type without an activity timeout ``spec.type_timeout``,
    records each handler's declared priority (:func:`actors.workers.control.handler`)
    and stores the periodic schedules.

    Raises:
        HandlerError, InvalidArgument: as :func:`check`.
        StoreError: the store cannot be opened.
    """
    import fdblayer
    from fdblayer.jobs import schedules, type_controls
    from fdblayer.jobs.keys import DEFAULT_LAYOUT
    from fdblayer.jobs.validate import check_key_size, check_type, check_type_timeout

    from actors.workers.control import handler_options
    from actors.workers.schedule import check_cron

    check(spec)
    for job_type in spec.types:
        check_key_size(DEFAULT_LAYOUT, check_type(job_type))
    for job_type in spec.periodic:  # its ticks' ids fit too
        check_key_size(DEFAULT_LAYOUT, job_type, "tick-00000000000")
    check_type_timeout(spec.type_timeout)
    declared = {
        job_type: (spec.type_timeout, handler_options(resolve(path)).get("priority"))
        for job_type, path in spec.types.items()
    }
    db = fdblayer.open(spec.store)
    try:
        # one transaction: the types' timeouts (where missing) and the handlers'
        # declared priorities (where producers read them; none declared: cleared)
        type_controls.declare_types(db, DEFAULT_LAYOUT, declared)
        for job_type, cron in spec.periodic.items():  # the data a jobs.schedule gave it is kept
            schedules.set_schedule(db, DEFAULT_LAYOUT, job_type, check_cron(cron), None, int(time.time()))
    finally:
        close = getattr(db, "close", None)
        if close is not None:
            close()


def host_name() -> str:
    """This host's name in the store: ``<machine>:<pid>-<6 random hex>``,
    its command's for its whole life (a restarted dispatcher takes back what
    its predecessor held under it). Unique to the run: a container restarted
    with the same hostname and pid 1, or two such containers at once, must
    not take each other's jobs back, nor resume another run's drain."""
    return f"{socket.gethostname()}:{os.getpid()}-{os.urandom(3).hex()}"


def host_args(spec: HostSpec) -> dict:
    """The worker tree's args for :func:`~actors.workers.sup.workers_children`."""
    return {
        "store": spec.store,
        "host": host_name(),  # kept by a restarted dispatcher
        "concurrency": spec.concurrency,
        "async_concurrency": spec.async_concurrency,
        "max_attempts": spec.max_attempts,
        "grace": spec.grace,
        "job_timeout": spec.job_timeout or None,
        "backoff": list(spec.backoff),
        "keep_finished": spec.keep_finished,
        "keep_failed": spec.keep_failed,
        "types": {t: {"handler": h} for t, h in spec.types.items()},
    }


def free_port() -> int:
    """A free loopback TCP port for the host's actor system."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drain(client: Client, grace: float) -> Any:
    """Ask a running host's dispatcher to drain (see :class:`Drain`)."""
    return client.call(names.WORKER_DISPATCHER, Drain(grace), grace + 15.0)


def run(spec: HostSpec, port: Optional[int] = None, level: int = logging.INFO) -> int:
    """Run a worker host in the foreground until SIGTERM/SIGINT; returns the exit status."""
    runtime_dir()  # not private: stop here, before a store file or a process is created
    prepare(spec)
    port = port or free_port()
    with catching_stops() as stops:  # a stop while the node starts is acted on once it is up
        node = start_node(port, HOST_FLAGS, workers_children(host_args(spec)), level=level)
        log.info(
            "worker_host_up port=%s store=%s concurrency=%d types=%s pid=%s",
            port,
            redact_url(spec.store),
            spec.concurrency,
            ",".join(spec.types),
            os.getpid(),
        )
        reason = wait_for_stop(node, stops)
        if reason == "supervisor_exited":
            log.error("worker_host_down reason=node_supervisor_exited port=%s", port)
            stop_node(port)
            return 1
        log.info("worker_host_stopping reason=%s port=%s grace=%.1fs", reason, port, spec.grace)
        with finishing_stop():
            try:
                answer = drain(node.client(), spec.grace)
                log.info("worker_host_drained port=%s %s", port, " ".join(f"{k}={v}" for k, v in answer.items()))
            except Exception as exc:  # noqa: BLE001 - stop anyway: the store keeps every job
                log.warning("worker_host_drain_failed port=%s error=%r", port, exc)
            node.stop()
    log.info("worker_host_stopped port=%s", port)
    return 0
