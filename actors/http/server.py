"""The HTTP listener as a supervised actor.

Principle: the actor owns one OS process, ``python -m actors.http.main``,
that serves the HTTP API (:mod:`actors.http.api`, on waitress) and talks
to the node's actors as a client. The process dies with the actor
(PR_SET_PDEATHSIG); the actor watches it through a pidfd and, when it
exits, crashes with that reason so its supervisor starts a new one. The
actor answers its start only once the process listens (or fails with the
process's reason: a port in use, a refused bind address).

* Admins are read here, from the config file's ``[admins]`` section
  (clear passwords hashed and the file rewritten, see :mod:`actors.http.auth`),
  and handed to the process on its stdin with the session secret.
* With no admin configured, only a loopback ``bind_address`` is accepted.
* The node's job policy (:class:`~actors.settings.policy.JobPolicy`: the
  handlers and stores a job may name) is built here from the config and
  handed to the process the same way.
* ``GetHttpInfo()`` answers ``{"port", "bind_address", "pid"}``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from supervision import DEFER_START, ChildSpec, GenServer

from actors.errors import ActorsError
from actors.http.auth import SESSION_TIMEOUT, load_admins
from actors.settings.config import node_name
from actors.settings.policy import JobPolicy
from actors import names

log = logging.getLogger(__name__)

HTTP_SERVER_NAME = names.HTTP_SERVER
STOP_TIMEOUT = 5.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding actors/


class HttpProcessExited(ActorsError):
    """The HTTP process ended; the actor exits with this reason."""


class HttpStartError(ActorsError):
    """The HTTP process could not start serving."""


@dataclass(frozen=True)
class GetHttpInfo:
    """Port, bind address and OS pid of the HTTP process."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(bind_address: str, admins: dict) -> None:
    """Raise HttpStartError for a non-loopback address with no admin."""
    if not admins and not is_loopback(bind_address):
        raise HttpStartError(
            f"refusing to listen on {bind_address}: no admin is configured "
            "(add one to the [admins] section, or keep bind_address = 127.0.0.1)"
        )


class HttpServer(GenServer):
    """args: ``{"admin_port", "port", "bind_address", "config_path", "secret", "config",
    "session_timeout", "store", "node_name", "policy", "sample_interval"}`` (the node's name, as job and doc
    entries show it, in ``_node/{name}`` paths and on the status page; the
    job policy as :meth:`~actors.settings.policy.JobPolicy.to_dict` gives it; the
    seconds between two readings of the queue's counters for the status
    page's charts, None for :data:`actors.http.throughput.INTERVAL`)."""

    def init(self, args: dict) -> Any:
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.pidfd: int | None = None
        self._line = b""
        self._ready = False
        self.port = args["port"]
        admins = load_admins(args.get("config_path"))
        check_bind(args["bind_address"], admins)
        settings = {
            "bind_address": args["bind_address"],
            "admins": admins,
            "secret": args["secret"],
            "session_timeout": args.get("session_timeout", SESSION_TIMEOUT),
            "config": args.get("config") or {},
            "node": args.get("node_name") or str(self.node),
            "parent_pid": os.getpid(),
            "store": args.get("store"),
            "policy": args.get("policy"),
            "sample_interval": args.get("sample_interval"),
        }
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                [_PACKAGE_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            ),
        )
        proc = self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors.http.main",
                "--admin-port",
                str(args["admin_port"]),
                "--port",
                str(args["port"]),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert proc.stdin is not None and proc.stdout is not None  # both are pipes
        proc.stdin.write(json.dumps(settings).encode())
        proc.stdin.close()
        self.pidfd = os.pidfd_open(proc.pid)
        os.set_blocking(proc.stdout.fileno(), False)
        self.watch_fd(proc.stdout.fileno(), self._on_output)
        self.watch_fd(self.pidfd, self._on_exit)
        return DEFER_START

    def _running(self) -> tuple[subprocess.Popen[bytes], IO[bytes], int]:
        """The HTTP process, its stdout and its pidfd: set from init until
        terminate, which unwatches the descriptors whose callbacks read them."""
        proc, pidfd = self.proc, self.pidfd
        assert proc is not None and proc.stdout is not None and pidfd is not None
        return proc, proc.stdout, pidfd

    def format_status(self) -> dict:
        return {
            "port": self.port,
            "bind_address": self.args.get("bind_address"),
            "pid": self.proc.pid if self.proc else None,
        }

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, GetHttpInfo):
            return {"port": self.port, "bind_address": self.args["bind_address"], "pid": self._running()[0].pid}
        return super().handle_call(msg, from_)

    def _on_output(self) -> None:
        proc, stdout, _ = self._running()
        fd = stdout.fileno()
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        if not data:
            self.unwatch_fd(fd)
            return
        self._line += data
        if b"\n" not in self._line or self._ready:
            return
        line = self._line.split(b"\n", 1)[0].decode(errors="replace")
        if line.startswith("ready"):
            self._ready = True
            self.port = int(line.split()[1])
            log.info("http_listening address=%s:%s pid=%s", self.args["bind_address"], self.port, proc.pid)
            self.start_complete()
        else:
            self._fail(HttpStartError(line.partition(" ")[2] or line))

    def _on_exit(self) -> None:
        proc, _, pidfd = self._running()
        self.unwatch_fd(pidfd)
        status: int | str | None = proc.poll()
        if status is None:
            try:
                status = proc.wait(1.0)
            except subprocess.TimeoutExpired:
                status = "unknown"
        what = (
            f"killed by {signal.Signals(-status).name}"
            if isinstance(status, int) and status < 0
            else f"exited with status {status}"
        )
        if not self._ready:
            self._fail(HttpStartError(f"HTTP process {proc.pid} {what} before listening"))
            return
        raise HttpProcessExited(f"HTTP process {proc.pid} {what}")

    def _fail(self, reason: Exception) -> None:
        self.terminate(reason)
        self.start_failed(reason)

    def terminate(self, reason: Any) -> None:
        if self.proc is None:
            return
        proc, stdout, pidfd = self._running()
        for fd in (stdout.fileno(), pidfd):
            self.unwatch_fd(fd)
        if proc.poll() is None:
            proc.kill()  # it leaves stop signals to the node's owner (SIGTERM ended it as abruptly)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        stdout.close()
        os.close(pidfd)
        self.proc = None


def http_children(
    config: Any,
    *,
    admin_port: int | None = None,
    config_path: str | None = None,
    secret: str | None = None,
    sample_interval: float | None = None,
) -> list[ChildSpec]:
    """The HTTP listener as a node root child.

    Args:
        config: the node's :class:`~actors.settings.config.Config` ([node] port,
            http_port, bind_address, store (documents are read and written
            there); [couch_jobs] (its start-time values, shown when the
            node's settings keeper does not answer); [replicator] handlers
            and stores (the job policy, :class:`~actors.settings.policy.JobPolicy`).
        admin_port: the node's admin port (default: ``[node] port``).
        config_path: the INI file holding ``[admins]`` (default: the
            config's ``path`` attribute, if it has one).
        secret: the session-signing secret (default: random per node
            start, so sessions survive a restart of the HTTP process only).
        sample_interval: seconds between two readings of the queue's
            counters for the status page's charts (default: a minute;
            tests and demos read more often).
    """
    args = {
        "admin_port": admin_port if admin_port is not None else config.node.port,
        "port": config.node.http_port,
        "bind_address": config.node.bind_address,
        "config_path": config_path if config_path is not None else getattr(config, "path", None),
        "secret": secret or os.urandom(32).hex(),
        "config": {"couch_jobs": config.section("couch_jobs")},
        "session_timeout": SESSION_TIMEOUT,
        "store": config.node.store,
        "node_name": node_name(config),
        "policy": JobPolicy.from_config(config).to_dict(),
        "sample_interval": sample_interval,
    }
    return [ChildSpec("http_server", HttpServer, args, name=HTTP_SERVER_NAME, shutdown=STOP_TIMEOUT + 2)]


__all__ = [
    "HttpServer",
    "GetHttpInfo",
    "HttpProcessExited",
    "HttpStartError",
    "http_children",
    "HTTP_SERVER_NAME",
    "check_bind",
    "is_loopback",
]
