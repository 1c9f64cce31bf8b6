"""A node: one long-lived actor system holding the supervision tree.

:func:`run` starts a node in the foreground and blocks until SIGTERM or
SIGINT (or ``otpjobs node stop``), then drains its worker pool as
``otpjobs worker`` does (claimed jobs back in the queue at once, running
handlers see ``ctx.stopping`` and get ``[worker] grace`` seconds), then
stops the tree in order and every process of the node. If the node
supervisor itself exits (its restart intensity was exceeded), the node logs
why and exits with status 1, as an Erlang node does when its top
supervisor dies. If this process is killed, the node dies with it
(``start_node``'s ``die_with_owner``).
"""

from __future__ import annotations

import logging
import os
import socket

from supervision import Node
from supervision.runtime import runtime_dir
from supervision.owner import catching_stops, finishing_stop
from supervision.system import start_node, stop_node, wait_for_stop
from fdblayer.urls import redact_url

from actors.errors import ActorsError
from actors.handlers import add_cwd_to_path
from actors.settings.config import Config

log = logging.getLogger("otpjobs.node")

#: The node supervisor's flags: the root of the product's tree.
ROOT_FLAGS = {"strategy": "one_for_one", "intensity": 3, "period": 10}


def root_children(config: Config) -> list:
    """The node's top-level children, in start order: the settings keeper
    (the run-time ``[replicator]`` and ``[couch_jobs]`` values, started
    before and outliving every actor that reads them), the queue tree, the
    scheduler tree (scheduler_sup then scheduler, rest_for_one), the doc
    processor (adopts permanent jobs through the queue and runs them on the
    scheduler; its lease fence bounds how long their jobs run without a
    renewal), then the HTTP listener."""
    from actors.settings.keeper import config_children
    from actors.docs.processor import doc_children
    from actors.http.server import http_children
    from actors.queue.sup import jobs_children
    from actors.scheduler.fence import fence_path
    from actors.scheduler.sup import scheduler_children

    fence = fence_path(config.node.port)
    return (
        config_children(config)
        + jobs_children(config, config_server=False)
        + scheduler_children(config, fence=fence)
        + doc_children(config, fence=fence)
        + http_children(config)
        + _workers(config)
    )


def _workers(config: Config) -> list:
    """The node's worker pool (``[workers]`` / ``--workers``), if it runs one."""
    if not config.workers:
        return []
    from actors.workers.host import host_args, spec_from_config
    from actors.workers.sup import workers_children

    return workers_children(host_args(spec_from_config(config, [], [])))


def check_store(url: str) -> None:
    """Open and close the store once so a bad URL fails before anything forks."""
    import fdblayer

    db = fdblayer.open(url)
    close = getattr(db, "close", None)
    if close is not None:
        close()


class PortUnavailable(ActorsError, ValueError):
    """A port the node listens on is taken (or cannot be bound)."""


def check_http_port(config: Config) -> None:
    """Fail before anything is created (the store, a process) when the HTTP
    port is taken, naming it and the setting that chooses it. (The admin
    port is ``start_node``'s: it replaces what a killed node left there.)

    Raises:
        PortUnavailable: the HTTP port cannot be bound.
    """
    http_port, address = config.node.http_port, config.node.bind_address
    if not http_port:
        return  # 0: the system picks a free one
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
        try:
            probe.bind((address, http_port))
        except OSError as exc:
            raise PortUnavailable(
                f"HTTP port {address}:{http_port} is not available ({exc.strerror}); "
                "another node may be using it: choose another with --http-port "
                "or [node] http_port"
            ) from None


def with_app(config: Config, builtin: list) -> list:
    """``builtin`` then the children of the node's app (``[node] app`` /
    ``--app``), checked.

    Raises:
        AppError: the app cannot be used (see :func:`actors.node.app.load_app`).
    """
    path = config.node.app
    if not path:
        return builtin
    from actors.node.app import load_app

    return builtin + load_app(path, builtin)


def run(config: Config) -> int:
    """Run a node in the foreground until told to stop; returns the exit status.

    Raises:
        AppError, PortUnavailable, HandlerError, StoreError, RuntimeDirError:
            before anything starts, when the node's app, HTTP port, worker
            handlers, store or runtime directory cannot be used.
    """
    runtime_dir()  # not private: stop here, before a store file or a process is created
    add_cwd_to_path()  # handlers beside the node, as `python -m`: the installed script's path lacks it
    port = config.node.port
    store = config.node.store
    children = with_app(config, root_children(config))
    check_http_port(config)
    spec = None
    if config.workers:
        from actors.workers.host import check, spec_from_config

        spec = spec_from_config(config, [], [])
        check(spec)  # a bad handler or cron stops here, before the store file is made
    check_store(store)
    if spec is not None:
        from actors.workers.host import prepare

        prepare(spec)
    level = getattr(logging, config.node.log_level.upper())
    with catching_stops() as stops:  # a stop while the node starts is acted on once it is up
        node = start_node(port, ROOT_FLAGS, children, level=level)
        log.info(
            "node_up port=%s store=%s http_port=%s pid=%s supervisor_pid=%s app=%s",
            port,
            redact_url(store),
            config.node.http_port,
            os.getpid(),
            node.pid,
            config.node.app or "-",
        )
        reason = wait_for_stop(node, stops)
        if reason == "supervisor_exited":
            log.error("node_down reason=node_supervisor_exited port=%s", port)
            stop_node(port)
            return 1
        log.info("node_stopping reason=%s port=%s", reason, port)
        with finishing_stop():
            if config.workers:
                _drain(node, config.worker.grace)
            node.stop()
    log.info("node_stopped port=%s", port)
    return 0


def _drain(node: Node, grace: float) -> None:
    """Drain the node's worker pool before its tree stops (as ``otpjobs worker`` does)."""
    from actors.workers.host import drain

    try:
        answer = drain(node.client(), grace)
        log.info(
            "node_drained port=%s grace=%.1fs %s", node.port, grace, " ".join(f"{k}={v}" for k, v in answer.items())
        )
    except Exception as exc:  # noqa: BLE001 - stop anyway: the store keeps every job
        log.warning("node_drain_failed port=%s error=%r", node.port, exc)
