"""Shared fixtures of the PostgreSQL fault tests of worker hosts: a server of their own (so it
can be stopped, restarted and its backends terminated), a fresh store on it,
a ledger of handler runs. No tests here."""

from __future__ import annotations

import collections
import textwrap
import uuid

import psycopg
import pytest

import fdblayer
from tests.conftest import running
from tests.workers.hosts import run_ledger
from fdblayer.backends.postgres_server import TemporaryServer

PROBE = """
import json, os, time

def _log(ctx, event, **more):
    with open(os.environ["RUN_LOG"], "a") as f:
        f.write(json.dumps({"id": ctx.id, "type": ctx.type, "event": event, "attempt": ctx.attempt,
                            "pid": os.getpid(), "t": time.time(), **more}) + "\\n")

def nap(ctx):
    _log(ctx, "start")
    time.sleep(ctx.data.get("s", 0.01))
    _log(ctx, "end")
    return ctx.data.get("n")

def polite(ctx):
    _log(ctx, "start")
    ctx.wait_stopping(ctx.data.get("s", 60))
    _log(ctx, "stopping" if ctx.stopping else "end")
    return "stopped" if ctx.stopping else "slept"

def progressing(ctx):
    _log(ctx, "start")
    until = time.monotonic() + ctx.data.get("s", 3)
    while time.monotonic() < until:
        ctx.progress(at=time.time())
        time.sleep(0.1)
    _log(ctx, "end")
    return ctx.data.get("n")

def stubborn(ctx):
    _log(ctx, "start")
    until = time.monotonic() + ctx.data.get("s", 5)
    while time.monotonic() < until:
        time.sleep(0.02)
    _log(ctx, "end")
    return ctx.data.get("n")
"""


@pytest.fixture(scope="module")
def own_pg():
    yield from running(TemporaryServer(durable=True))


@pytest.fixture
def pg_store(own_pg):
    url = own_pg.url(prefix=f"p{uuid.uuid4().hex[:12]}")
    yield url
    if own_pg._process is None:  # noqa: SLF001 - a test left it down
        own_pg.launch()
    try:
        handle = fdblayer.open(url)
    except fdblayer.StoreError:
        return
    try:
        handle.drop()  # type: ignore[attr-defined]
    finally:
        handle.close()


@pytest.fixture
def pdb(pg_store):
    handle = fdblayer.open(pg_store)
    yield handle
    handle.close()


@pytest.fixture
def runlog(workdir):
    (workdir / "p2_mod.py").write_text(textwrap.dedent(PROBE))
    path = workdir / "runs.jsonl"

    return run_ledger(path)


def per_id(records) -> collections.Counter:  # noqa: ANN001
    return collections.Counter(r["id"] for r in records)


def terminate_backends(server: TemporaryServer, pids=None) -> int:  # noqa: ANN001
    """pg_terminate_backend of every client backend (but ours), or of those
    whose application_name names one of ``pids``; returns how many."""
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, application_name FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
        n = 0
        for pid, app in rows:
            if pids is not None and not any(app == f"otpjobs[{p}]" for p in pids):
                continue
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            n += 1
        return n


# ---------------------------------------------------------------- a proxy that loses commits' answers
import socket  # noqa: E402
import struct  # noqa: E402
import threading  # noqa: E402

_SSL_CODES = (80877103, 80877104)  # SSLRequest, GSSENCRequest


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


class CommitCutter:
    """A TCP proxy in front of a PostgreSQL server. ``cut(n, app=...)``: the next
    ``n`` commit calls (the store's ``<prefix>_commit`` function) of connections
    whose application_name contains ``app`` are forwarded to the server, run
    there to the end (its ReadyForQuery is awaited), and then both sides of the
    connection are closed without the answer: a commit whose answer is lost."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(200)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.to_cut = 0
        self.app = ""
        self.cut_done = 0
        self.commits_seen = 0
        self.closed = False
        self.socks: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, prefix: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres?prefix={prefix}"

    def cut(self, n: int, app: str = "") -> None:
        with self.lock:
            self.to_cut, self.app = n, app

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for s in list(self.socks):
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.server_port))
            except OSError:
                client.close()
                continue
            self.socks += [client, server]
            conn = {"app": "", "statements": {}, "commit_pending": False, "drop": False}
            threading.Thread(target=self._c2s, args=(client, server, conn), daemon=True).start()

    def _c2s(self, client, server, conn) -> None:  # noqa: ANN001
        try:
            while True:  # startup phase: untyped messages
                head = _recv_exact(client, 8)
                length, code = struct.unpack("!ii", head)
                body = _recv_exact(client, length - 8)
                if code in _SSL_CODES:  # answered with one byte ('N': not here)
                    server.sendall(head + body)
                    client.sendall(_recv_exact(server, 1))
                    continue
                params = body.split(b"\x00")
                for k, v in zip(params[::2], params[1::2], strict=False):
                    if k == b"application_name":
                        conn["app"] = v.decode()
                server.sendall(head + body)
                threading.Thread(target=self._s2c, args=(client, server, conn), daemon=True).start()
                break
            while True:
                kind = _recv_exact(client, 1)
                length = struct.unpack("!i", _recv_exact(client, 4))[0]
                body = _recv_exact(client, length - 4)
                if kind == b"P":
                    name, rest = body.split(b"\x00", 1)
                    query = rest.split(b"\x00", 1)[0]
                    conn["statements"][name] = query
                    if b'_commit"(' in query and name == b"":
                        self._maybe_arm(conn)
                elif kind == b"B":
                    _portal, rest = body.split(b"\x00", 1)
                    stmt = rest.split(b"\x00", 1)[0]
                    if stmt and b'_commit"(' in conn["statements"].get(stmt, b""):
                        self._maybe_arm(conn)
                server.sendall(kind + struct.pack("!i", length) + body)
                if kind == b"S" and conn["commit_pending"]:
                    conn["commit_pending"] = False
                    conn["drop"] = True
        except (EOFError, OSError):
            pass
        finally:
            for s in (client, server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _maybe_arm(self, conn) -> None:  # noqa: ANN001
        with self.lock:
            self.commits_seen += 1
            if self.to_cut > 0 and self.app in conn["app"]:
                self.to_cut -= 1
                conn["commit_pending"] = True

    def _s2c(self, client, server, conn) -> None:  # noqa: ANN001
        try:
            while True:
                kind = _recv_exact(server, 1)
                length = struct.unpack("!i", _recv_exact(server, 4))[0]
                body = _recv_exact(server, length - 4)
                if conn["drop"]:
                    if kind == b"Z":  # the commit ran to its end on the server: lose its answer
                        with self.lock:
                            self.cut_done += 1
                        break
                    continue
                client.sendall(kind + struct.pack("!i", length) + body)
        except (EOFError, OSError):
            pass
        finally:
            for s in (client, server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
