"""A throwaway PostgreSQL server from the system's binaries (tests, benches, demos).

Principle: ``TemporaryServer`` runs ``initdb`` into a fresh temporary
directory and ``postgres`` on a free loopback port with its socket in that
directory, trusts local connections, and removes everything on ``stop()``.
PostgreSQL refuses to run as root, so under root the server runs as the
``postgres`` system user (Debian's package creates it), else ``nobody``.
Nothing here is used by the store itself: it is how the project's tests and
benchmarks get a real server, and how a user can try the backend.

Usage::

    with TemporaryServer() as server:
        db = fdblayer.open(server.url("otpjobs"))
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, List, Optional, TypedDict, cast

__all__ = ["TemporaryServer", "find_binaries", "ServerUnavailable"]

#: Where Debian's ``postgresql-NN`` packages put the server binaries.
_BIN_GLOB = "/usr/lib/postgresql/*/bin"


class ServerUnavailable(RuntimeError):
    """The binaries are missing, or the server did not start (the reason says which)."""


def find_binaries() -> str:
    """The directory holding ``initdb`` and ``postgres`` (the newest version).

    Raises:
        ServerUnavailable: when no PostgreSQL server is installed.
    """
    candidates = sorted(glob.glob(_BIN_GLOB), key=_version_of, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(os.path.dirname(on_path))
    for directory in candidates:
        if os.access(os.path.join(directory, "postgres"), os.X_OK):
            return directory
    raise ServerUnavailable(
        "PostgreSQL server binaries not found (initdb, postgres): install Debian's postgresql package"
    )


def _version_of(directory: str) -> int:
    name = os.path.basename(os.path.dirname(directory))
    return int(name) if name.isdigit() else 0


class _AsUser(TypedDict, total=False):
    """The ``subprocess`` arguments that run the server as its user."""

    user: int
    group: int
    extra_groups: List[int]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return cast(int, sock.getsockname()[1])


def _server_user() -> Optional[pwd.struct_passwd]:
    """The account the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ServerUnavailable("running as root and no 'postgres' or 'nobody' account to run the server")


class TemporaryServer:
    """A PostgreSQL server in a temporary directory, on 127.0.0.1.

    Args:
        durable: keep ``fsync`` on (benchmarks); tests turn it off for speed.
        settings: more ``name=value`` server settings.

    Attributes:
        port: the TCP port (loopback only).
        directory: the data directory's parent (the socket lives there too).
    """

    def __init__(self, durable: bool = False, settings: Optional[dict[str, Any]] = None) -> None:
        self.durable = durable
        self.settings = dict(settings or {})
        self.port = 0
        self.directory = ""
        self._bin = ""
        self._user = _server_user()
        self._process: Optional[subprocess.Popen[bytes]] = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> "TemporaryServer":
        """Create the cluster and start the server (about a second).

        Raises:
            ServerUnavailable: when the binaries are missing or it fails to start.
        """
        self._bin = find_binaries()
        self.directory = tempfile.mkdtemp(prefix="otpjobs-pg-")
        if self._user is not None:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        self._run(
            [
                os.path.join(self._bin, "initdb"),
                "-D",
                self.datadir,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--locale=C",
            ]
        )
        self.port = _free_port()
        self.launch()
        return self

    def launch(self) -> None:
        """Start the server process on the existing cluster (after ``start`` or ``kill``)."""
        args = [
            os.path.join(self._bin, "postgres"),
            "-D",
            self.datadir,
            "-p",
            str(self.port),
            "-k",
            self.directory,
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"fsync={'on' if self.durable else 'off'}",
            "-c",
            "max_connections=300",
            "-c",
            "shared_buffers=128MB",
        ]
        if not self.durable:
            args += ["-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        for name, value in self.settings.items():
            args += ["-c", f"{name}={value}"]
        log = open(os.path.join(self.directory, "server.log"), "ab")
        try:
            self._process = subprocess.Popen(
                args,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                **self._as_user(),
                start_new_session=True,
            )
        finally:
            log.close()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        socket_path = os.path.join(self.directory, f".s.PGSQL.{self.port}")
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise ServerUnavailable(f"postgres exited with {self._process.returncode}: {self.log_tail()}")
            if os.path.exists(socket_path) and self._accepts():
                return
            time.sleep(0.02)
        raise ServerUnavailable(f"postgres did not accept connections in {timeout:.0f} s: {self.log_tail()}")

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        import psycopg

        try:
            psycopg.connect(self.conninfo(), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def kill(self, mode: str = "immediate") -> None:
        """Stop the server process, keeping the cluster (``launch`` starts it again).

        Args:
            mode: ``"immediate"`` (SIGQUIT: no checkpoint, crash recovery at
                the next start, what a power cut does to connections),
                ``"fast"`` (SIGINT) or ``"kill"`` (SIGKILL of the postmaster).
        """
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        sig = {"immediate": signal.SIGQUIT, "fast": signal.SIGINT, "kill": signal.SIGKILL}[mode]
        process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if mode == "kill":  # the postmaster's children notice its death by themselves
            self._wait_children_gone()

    def _wait_children_gone(self, timeout: float = 10.0) -> None:
        pid_file = os.path.join(self.datadir, "postmaster.pid")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._backends_alive():
            time.sleep(0.05)
        if os.path.exists(pid_file):
            os.unlink(pid_file)

    def _backends_alive(self) -> bool:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmdline = fh.read()
            except OSError:
                continue
            if self.datadir.encode() in cmdline or f"port={self.port}".encode() in cmdline:
                return True
        return False

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        self.kill("fast")
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = ""

    def __enter__(self) -> "TemporaryServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ------------------------------------------------------------ addresses

    @property
    def datadir(self) -> str:
        """The cluster's data directory."""
        return os.path.join(self.directory, "data")

    def conninfo(self, dbname: str = "postgres") -> str:
        """A libpq connection string to ``dbname`` over loopback TCP."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def url(self, dbname: str = "postgres", prefix: Optional[str] = None) -> str:
        """A store URL of ``dbname`` on this server (``?prefix=`` when given)."""
        url = f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"
        return url + (f"?prefix={prefix}" if prefix else "")

    def create_database(self, dbname: str) -> None:
        """``CREATE DATABASE dbname`` (a name of letters, digits and ``_``)."""
        if not dbname.replace("_", "").isalnum():
            raise ValueError(f"database name must be letters, digits and _: {dbname!r}")
        import psycopg

        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log (for error messages)."""
        try:
            with open(os.path.join(self.directory, "server.log"), "rb") as fh:
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return "(no server log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    # ------------------------------------------------------------ helpers

    def _as_user(self) -> _AsUser:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _run(self, args: List[str]) -> None:
        result = subprocess.run(args, capture_output=True, stdin=subprocess.DEVNULL, **self._as_user())
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
            raise ServerUnavailable(f"{os.path.basename(args[0])} failed ({result.returncode}): {output[-800:]}")
