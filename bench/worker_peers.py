"""Worker throughput of the peers (Huey, RQ, Celery), run as their users run them.

Principle: a peer's worker throughput is measured with its own worker
processes started from its own command line (``huey_consumer``, ``rq
worker-pool``, ``celery worker``), on its own storage, each job a plain
function of ``peer_tasks`` (``noop``, ``sleep10``, ``cpu5``) that returns 1,
so that every peer stores one result per job: the completion record the
driver counts. The driver adds nothing per job: it polls the peer's own
count of completed jobs every 20 ms and takes the first poll that sees them
all as the end mark (so an end mark is late by at most one poll, 20 ms).
This module is the peer side of ``bench_workers.py``, which prints our
figures beside these; run alone it prints the peers' table.

Scenarios (jobs/s = jobs / seconds):

* ``drain``: ``jobs`` jobs are enqueued while no worker runs, then the
  workers are started; seconds run from just before the worker command is
  started to the end mark, so they include the workers' start
  (``first_done_s``, the time to the first poll seeing a job done, shows
  how much).
* ``stream``: the workers are started and warmed up (RQ: until all are
  registered in Redis; then 2 x workers jobs of the same handler run and
  are waited for), so they are running and idle; then this process
  enqueues ``jobs`` jobs one by one as fast as it can, and polls only after
  the last one; seconds run from the first enqueue to the end mark.
  ``enqueue_per_s`` is the producer's own rate, an upper bound on the
  stream's (``first_done_s`` is None: no poll runs during the enqueues).

Peers and settings (durability FULL / NORMAL):

* ``huey``: ``SqliteHuey`` on a file in a fresh temporary directory,
  journal_mode=wal; FULL = ``fsync=True`` (``PRAGMA synchronous=FULL``),
  NORMAL = a subclass setting ``PRAGMA synchronous=NORMAL`` (see
  ``peer_huey_app``); the driver checks both pragmas. One ``huey_consumer
  peer_huey_app.huey -w N -k thread|process -d 0.01 -q``: threads for noop
  and sleep10, processes for cpu5 (``HUEY_WORKER_TYPE``); ``-d 0.01`` polls
  an empty queue from 10 ms (Huey's default is 100 ms; a SQLite queue is
  polled, it cannot block), backing off by Huey's default 1.15x up to its
  default 10 s. Completion: rows in Huey's result store (``SELECT count(*)
  FROM kv``). Huey has no acknowledgement: a dequeue deletes the task, so a
  worker that dies mid-task loses it.
* ``rq``: a loopback ``redis-server`` that this module starts on a free
  port of 127.0.0.1 in the run's temporary directory, always with ``--save
  ""`` (no RDB snapshots); FULL = ``--appendonly yes --appendfsync
  always``, NORMAL = ``--appendonly no`` (a Redis crash then loses every
  job, where SQLite at NORMAL loses none); the driver checks
  ``appendonly``. ``rq worker-pool -n N -q -w rq.Worker`` (``--burst`` for
  drain): one process forking N workers (each also runs RQ's scheduler, as
  the pool does), each forking a work horse per job (RQ's default
  ``Worker``); ``RQ_LAUNCH = "workers"`` starts N ``rq worker`` processes
  instead, ``RQ_WORKER_CLASS`` picks another worker class. Results are kept
  500 s (RQ's default). Completion: RQ's finished-job registry (ZCARD); a
  job in the failed registry aborts the run.
* ``celery``: the same kind of loopback Redis (db 0 broker, db 1 results).
  ``celery -A peer_celery_app worker --concurrency N --pool threads|prefork
  --loglevel WARNING --without-mingle --without-gossip --without-heartbeat``:
  threads for noop and sleep10 (measured faster than prefork for both:
  16 workers, noop 276 vs 199 jobs/s draining), prefork for cpu5
  (``CELERY_POOL``); ``task_acks_late=True``, prefetch multiplier 4 (the
  default), JSON. The workers store each result in Redis db 1 (one key per
  task: completion is ``DBSIZE`` of db 1); this process enqueues with
  ``Task.delay()`` through an app with no result backend, as a
  fire-and-forget producer does (with a Redis backend, Celery's producer
  SUBSCRIBEs to every task's result channel, a cost of the caller, not of
  the workers).

All peers log at WARNING (no per-job log lines), into files of the run's
temporary directory. Every process is started with
``start_new_session=True``; at the end of its run its leader gets SIGTERM
(as a process supervisor sends it) and up to 10 s to exit, then every
process group still in its session gets SIGKILL (RQ's work horses have
groups of their own in the same session), and the run fails if any process
of the session survives. The only waits are 20 ms polls of an observable
condition: completion, Redis answering PING, RQ's workers registered, and
processes gone.

A missing peer package, peer command or ``redis-server`` makes that peer's
functions raise ``PeerUnavailable(reason)``.

Usage (peers: ``pip install huey rq redis celery``; the Redis server:
``apt-get install --no-install-recommends redis-server``)::

    .venv/bin/python bench/worker_peers.py [--jobs 1000] [--rq-jobs 300]
        [--workers 16] [--handlers noop,sleep10,cpu5] [--peers huey,rq,celery]
        [--scenarios drain,stream] [--durability FULL,NORMAL]
        [--rq-launch pool|workers] [--rq-worker-class rq.Worker]

The default matrix (36 runs, 16 workers) took about 4-5 minutes on this
project's 2-CPU machine while another test suite ran; RQ, which forks a
process per job, is most of it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from importlib import metadata
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # peer_tasks, peer_huey_app, peer_celery_app

PEERS = ("huey", "rq", "celery")
SCENARIOS = ("drain", "stream")
HANDLERS = ("noop", "sleep10", "cpu5")
WORKERS = (1, 4, 16)
DURABILITIES = ("FULL", "NORMAL")

#: Seconds between two polls of a peer's completion count (or of any condition waited for).
POLL_SECONDS = 0.020

#: Huey's worker type per handler (``huey_consumer -k``).
HUEY_WORKER_TYPE = {"noop": "thread", "sleep10": "thread", "cpu5": "process"}

#: Celery's pool per handler (``celery worker --pool``).
CELERY_POOL = {"noop": "threads", "sleep10": "threads", "cpu5": "prefork"}

#: How RQ's N workers are started: "pool" = ``rq worker-pool -n N``, "workers" = N ``rq worker``.
RQ_LAUNCH = "pool"

#: RQ's worker class (``-w``): its default ``rq.Worker`` forks a work horse per job;
#: ``rq.worker.SimpleWorker`` runs jobs in the worker process.
RQ_WORKER_CLASS = "rq.Worker"

#: Seconds a stopped process group has to exit after SIGTERM before SIGKILL.
STOP_SECONDS = 10.0


class PeerUnavailable(Exception):
    """A peer cannot run here (package, command or redis-server missing); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- small helpers


def poll(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Call ``condition`` every 20 ms until it returns something true; return that.

    Raises TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(POLL_SECONDS)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(name: str) -> Optional[str]:
    """Path of console script ``name``: beside this Python first, else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which(name)


def missing_modules(*names: str) -> list[str]:
    """Those of ``names`` that cannot be imported."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def require(modules: tuple[str, ...], commands: tuple[str, ...], redis_server: bool) -> None:
    """Raise PeerUnavailable unless the modules, commands and (if asked) redis-server exist."""
    missing = missing_modules(*modules)
    if missing:
        raise PeerUnavailable(f"{', '.join(missing)} not installed (pip install {' '.join(missing)})")
    for name in commands:
        if command(name) is None:
            raise PeerUnavailable(f"command {name!r} not found beside {sys.executable} or on PATH")
    if redis_server and shutil.which("redis-server") is None:
        raise PeerUnavailable("redis-server not installed (apt-get install --no-install-recommends redis-server)")


def compile_ours() -> str:
    """Write the bytecode of our packages, as ``pip install`` does for every
    peer (and for us, installed from a wheel). From an editable checkout, on
    a machine that sets ``PYTHONDONTWRITEBYTECODE`` (this one does), each of
    our commands would otherwise compile its ~80 modules from source at
    every start: 0.05-0.07 s of a worker host's start, paid by no peer.

    Returns:
        A line saying what was done, for the bench's header.
    """
    import compileall

    root = os.path.dirname(HERE)
    ok = all(
        compileall.compile_dir(os.path.join(root, package), quiet=1)
        for package in ("supervision", "fdblayer", "actors")
    )
    return "our packages byte-compiled (as an install would)" if ok else "our packages: byte-compiling failed"


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment, with bench/ on PYTHONPATH and ``extra`` set."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def log_tail(path: str, chars: int = 1500) -> str:
    """The last ``chars`` characters of a log file ("" if none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def version(dist: str) -> str:
    """Installed version of distribution ``dist``, or "missing"."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


def redis_server_version() -> str:
    """``redis-server --version``'s v=..., or "missing"."""
    binary = shutil.which("redis-server")
    if binary is None:
        return "missing"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    for word in out.split():
        if word.startswith("v="):
            return word[2:]
    return out.strip() or "unknown"


def versions() -> dict[str, str]:
    """Versions of each peer package, redis-py, redis-server and Python."""
    return {
        "huey": version("huey"),
        "rq": version("rq"),
        "celery": version("celery"),
        "kombu": version("kombu"),
        "redis-py": version("redis"),
        "redis-server": redis_server_version(),
        "python": platform.python_version(),
    }


# ---------------------------------------------------------------- processes


#: Session ids (= leader PIDs) of every process started here and not yet seen gone.
SESSIONS: set[int] = set()


def spawn(argv: list[str], log_path: str, env: Optional[dict[str, str]] = None) -> subprocess.Popen:
    """Start ``argv`` in a session of its own (cwd bench/), output appended to ``log_path``."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=HERE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    SESSIONS.add(proc.pid)
    return proc


def proc_stat(pid: int) -> Optional[tuple[str, int, int]]:
    """(state, process group, session) of process ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return fields[0].decode(), int(fields[2]), int(fields[3])


def session_members(sid: int) -> dict[int, int]:
    """{pid: process group} of the live (not zombie) processes of session ``sid``."""
    members = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat and stat[2] == sid and stat[0] not in ("Z", "X"):
                members[int(name)] = stat[1]
    return members


def signal_session(sid: int, sig: int) -> None:
    """Send ``sig`` to every process group that has a member in session ``sid``."""
    for pgid in set(session_members(sid).values()):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass


def stop_sessions(procs: list[subprocess.Popen]) -> None:
    """Stop every process of each of ``procs``' sessions; raise if any survives.

    Each leader (the command started) gets SIGTERM, as a process supervisor
    sends it, and up to 10 s to exit; then every process group still in its
    session gets SIGKILL (signalling the whole group at once would hit RQ's
    workers twice, once from us and once from their pool, and a worker hit
    while handling the first signal can stay blocked in BLPOP)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        signal_session(proc.pid, signal.SIGKILL)
        proc.wait(STOP_SECONDS)
    for proc in procs:
        sid = proc.pid
        poll(lambda: not session_members(sid), STOP_SECONDS, f"session {sid} ({proc.args[0]}) to exit")
        SESSIONS.discard(sid)


def survivors() -> dict[int, list[int]]:
    """{session id: live PIDs} of sessions started here that still have processes."""
    out = {}
    for sid in sorted(SESSIONS):
        members = session_members(sid)
        if members:
            out[sid] = sorted(members)
    return out


# ---------------------------------------------------------------- Redis


class RedisServer:
    """A loopback ``redis-server`` in ``directory`` at a durability; ``stop`` ends it by PID."""

    def __init__(self, directory: str, durability: str) -> None:
        import redis

        self.port = free_port()
        self.log = os.path.join(directory, "redis.log")
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"] if durability == "FULL" else ["--appendonly", "no"]
        )
        self.proc = spawn(
            [
                shutil.which("redis-server"),
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--dir",
                directory,
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
                "--logfile",
                "",
                *persistence,
            ],
            self.log,
        )
        self.url = f"redis://127.0.0.1:{self.port}"
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            poll(self._answers, 10, f"redis-server on port {self.port} to answer PING")
            config = self.client.config_get("appendonly")
            if config.get("appendonly") != ("yes" if durability == "FULL" else "no"):
                raise RuntimeError(f"redis-server runs appendonly={config}, wanted durability {durability}")
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        """Whether the server answers PING (raises if it exited)."""
        import redis

        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited {self.proc.returncode}: {log_tail(self.log)}")
        try:
            return bool(self.client.ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        """Close the client and stop the server's process group (its PID)."""
        self.client.close()
        stop_sessions([self.proc])


# ---------------------------------------------------------------- the peers


class Peer:
    """One peer's run: its storage, its worker processes, its completion count.

    Subclasses set ``name``, ``requirements`` and implement ``enqueue``,
    ``start_workers``, ``done`` and ``verify``."""

    name = ""
    #: (modules, commands, needs redis-server)
    requirements: tuple[tuple[str, ...], tuple[str, ...], bool] = ((), (), False)

    def __init__(self, handler: str, workers: int, durability: str) -> None:
        if handler not in HANDLERS:
            raise ValueError(f"handler must be one of {HANDLERS}, not {handler!r}")
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be one of {DURABILITIES}, not {durability!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, not {workers}")
        require(*self.requirements)
        self.handler, self.workers, self.durability = handler, workers, durability
        self.dir = tempfile.mkdtemp(prefix=f"worker-peers-{self.name}-")
        self.procs: list[subprocess.Popen] = []
        self.logs: list[str] = []
        self.redis: Optional[RedisServer] = None
        try:
            self.setup()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "Peer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def setup(self) -> None:
        """Open the peer's storage (and server)."""

    def settings(self) -> str:
        """The settings of this run, in words."""
        raise NotImplementedError

    def pool(self) -> str:
        """How the workers run jobs (threads or processes)."""
        raise NotImplementedError

    def enqueue(self) -> None:
        """Enqueue one job of the handler, as the peer's users do."""
        raise NotImplementedError

    def start_workers(self, burst: bool) -> None:
        """Start the workers (``burst``: let them exit once the queue is empty, where the peer can)."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether all workers are up, where the peer can tell (else True)."""
        return True

    def done(self) -> int:
        """Jobs completed so far, from the peer's own bookkeeping."""
        raise NotImplementedError

    def failed(self) -> int:
        """Jobs failed so far, where the peer counts them cheaply (else 0)."""
        return 0

    def verify(self, total: int) -> None:
        """Check after the run that ``total`` jobs completed, each returning 1."""
        raise NotImplementedError

    def spawn(self, argv: list[str], env: dict[str, str]) -> None:
        """Start one worker command, logging to a file of this run's directory."""
        log = os.path.join(self.dir, f"worker-{len(self.procs)}.log")
        self.logs.append(log)
        self.procs.append(spawn(argv, log, env))

    def logs_tail(self) -> str:
        """The ends of the workers' logs, for an error message."""
        return "\n".join(f"--- {os.path.basename(p)}:\n{log_tail(p)}" for p in self.logs[:3])

    def check_workers(self, burst: bool) -> bool:
        """Raise if a worker failed; return whether every worker has exited."""
        codes = [p.poll() for p in self.procs]
        if any(c not in (None, 0) for c in codes) or (not burst and any(c is not None for c in codes)):
            raise RuntimeError(f"{self.name} worker exited {codes}:\n{self.logs_tail()}")
        if self.failed():
            raise RuntimeError(f"{self.name}: {self.failed()} job(s) failed:\n{self.logs_tail()}")
        return all(c is not None for c in codes)

    def close(self) -> None:
        """Stop every worker and the server, check none survives, remove the directory."""
        errors = []
        try:
            stop_sessions(self.procs)
        except Exception as exc:  # go on stopping the server
            errors.append(exc)
        self.procs = []
        self.close_storage()
        if self.redis is not None:
            try:
                self.redis.stop()
            except Exception as exc:
                errors.append(exc)
            self.redis = None
        shutil.rmtree(self.dir, ignore_errors=True)
        if errors:
            raise RuntimeError(f"{self.name}: could not stop every process: {errors}")

    def close_storage(self) -> None:
        """Close this process's connections to the peer's storage."""


class HueyPeer(Peer):
    """Huey: SqliteHuey in a temporary file, one ``huey_consumer`` with N threads or processes."""

    name = "huey"
    requirements = (("huey",), ("huey_consumer",), False)

    def setup(self) -> None:
        import peer_huey_app

        self.db = os.path.join(self.dir, "huey.db")
        self.app, tasks = peer_huey_app.make_huey(self.db, self.durability)
        level, mode = peer_huey_app.storage_pragmas(self.app)
        if level != peer_huey_app.SYNCHRONOUS[self.durability] or mode != "wal":
            raise RuntimeError(
                f"huey storage runs synchronous={level} journal_mode={mode}, wanted {self.durability} and wal"
            )
        self.task = tasks[self.handler]
        self.kind = HUEY_WORKER_TYPE[self.handler]

    def settings(self) -> str:
        sync = "fsync=True (synchronous=FULL)" if self.durability == "FULL" else "synchronous=NORMAL subclass"
        return f"SqliteHuey {sync}, journal_mode=wal, results stored; huey_consumer -w N -k thread|process -d 0.01 -q"

    def pool(self) -> str:
        return {"thread": "threads", "process": "processes"}[self.kind]

    def enqueue(self) -> None:
        self.task()

    def start_workers(self, burst: bool) -> None:
        import peer_huey_app

        env = child_env(**{peer_huey_app.ENV_DB: self.db, peer_huey_app.ENV_DURABILITY: self.durability})
        self.spawn(
            [
                command("huey_consumer"),
                "peer_huey_app.huey",
                "-w",
                str(self.workers),
                "-k",
                self.kind,
                "-d",
                "0.01",
                "-q",
            ],
            env,
        )

    def done(self) -> int:
        return self.app.storage.result_store_size()

    def verify(self, total: int) -> None:
        storage = self.app.storage
        values = [self.app.serializer.deserialize(v) for v in storage.result_items().values()]
        wrong = [v for v in values if v != 1]
        if len(values) != total or wrong or storage.queue_size():
            raise RuntimeError(
                f"huey: {len(values)} results (wanted {total}), {len(wrong)} not 1 "
                f"(e.g. {wrong[:1]}), {storage.queue_size()} still queued"
            )

    def close_storage(self) -> None:
        if getattr(self, "app", None) is not None:
            self.app.storage.close()


class RqPeer(Peer):
    """RQ: a loopback redis-server, ``rq worker-pool -n N`` (or N ``rq worker``)."""

    name = "rq"
    requirements = (("rq", "redis"), ("rq",), True)
    QUEUE = "bench"

    def setup(self) -> None:
        from rq import Queue

        self.redis = RedisServer(self.dir, self.durability)
        self.queue = Queue(self.QUEUE, connection=self.redis.client)
        self.func = f"peer_tasks.{self.handler}"
        self.finished = self.queue.finished_job_registry
        self.failed_registry = self.queue.failed_job_registry

    def settings(self) -> str:
        persistence = "appendonly yes, appendfsync always" if self.durability == "FULL" else "appendonly no"
        launch = "rq worker-pool -n N" if RQ_LAUNCH == "pool" else "N x rq worker"
        return (
            f"redis-server --save '' {persistence}; {launch} -q -w {RQ_WORKER_CLASS} (--burst for drain), "
            f"result_ttl 500 s"
        )

    def pool(self) -> str:
        return "processes, fork/job" if RQ_WORKER_CLASS == "rq.Worker" else f"processes ({RQ_WORKER_CLASS})"

    def enqueue(self) -> None:
        self.queue.enqueue(self.func)

    def start_workers(self, burst: bool) -> None:
        url = f"{self.redis.url}/0"
        tail = [*(["--burst"] if burst else []), "-q", "-w", RQ_WORKER_CLASS, "-u", url, self.QUEUE]
        if RQ_LAUNCH == "pool":
            self.spawn([command("rq"), "worker-pool", "-n", str(self.workers), *tail], child_env())
        else:
            for _ in range(self.workers):
                self.spawn([command("rq"), "worker", *tail], child_env())

    def ready(self) -> bool:
        from rq import Worker

        return Worker.count(connection=self.redis.client, queue=self.queue) >= self.workers

    def done(self) -> int:
        return self.finished.get_job_count(cleanup=False)

    def failed(self) -> int:
        return self.failed_registry.get_job_count(cleanup=False)

    def verify(self, total: int) -> None:
        done, failed, queued = self.done(), self.failed(), len(self.queue)
        if done != total or failed or queued:
            raise RuntimeError(f"rq: {done} finished (wanted {total}), {failed} failed, {queued} still queued")


class CeleryPeer(Peer):
    """Celery: a loopback redis-server as broker and result store, one ``celery worker``."""

    name = "celery"
    requirements = (("celery", "redis"), ("celery",), True)

    def setup(self) -> None:
        import peer_celery_app
        import redis

        self.redis = RedisServer(self.dir, self.durability)
        self.broker, self.backend = f"{self.redis.url}/0", f"{self.redis.url}/1"
        self.app = peer_celery_app.make_celery(self.broker, None)
        self.task = self.app.tasks[peer_celery_app.TASK_NAMES[self.handler]]
        self.results = redis.Redis(host="127.0.0.1", port=self.redis.port, db=1)

    def settings(self) -> str:
        persistence = "appendonly yes, appendfsync always" if self.durability == "FULL" else "appendonly no"
        return (
            f"redis-server --save '' {persistence}; broker redis db 0, results redis db 1; "
            f"task_acks_late=True, prefetch x4, json; celery worker --concurrency N "
            f"--pool prefork|threads --without-mingle --without-gossip --without-heartbeat"
        )

    def pool(self) -> str:
        return CELERY_POOL[self.handler]

    def enqueue(self) -> None:
        self.task.delay()

    def start_workers(self, burst: bool) -> None:
        import peer_celery_app

        env = child_env(**{peer_celery_app.ENV_BROKER: self.broker, peer_celery_app.ENV_BACKEND: self.backend})
        self.spawn(
            [
                command("celery"),
                "-A",
                "peer_celery_app",
                "worker",
                "--concurrency",
                str(self.workers),
                "--pool",
                CELERY_POOL[self.handler],
                "--loglevel",
                "WARNING",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
                "--hostname",
                f"bench-{uuid.uuid4().hex[:8]}@%h",
            ],
            env,
        )

    def done(self) -> int:
        return self.results.dbsize()

    def verify(self, total: int) -> None:
        keys = list(self.results.scan_iter(match="celery-task-meta-*", count=1000))
        metas = [json.loads(v) for v in self.results.mget(keys)] if keys else []
        wrong = [m for m in metas if m.get("status") != "SUCCESS" or m.get("result") != 1]
        broker = self.redis.client
        queued, unacked = broker.llen("celery"), broker.hlen("unacked")
        if len(metas) != total or wrong or queued or unacked:
            raise RuntimeError(
                f"celery: {len(metas)} results (wanted {total}), {len(wrong)} not SUCCESS/1 "
                f"(e.g. {wrong[:1]}), {queued} queued, {unacked} unacked"
            )

    def close_storage(self) -> None:
        if getattr(self, "app", None) is not None:
            self.app.close()
        if getattr(self, "results", None) is not None:
            self.results.close()


PEER_CLASSES = {"huey": HueyPeer, "rq": RqPeer, "celery": CeleryPeer}


# ---------------------------------------------------------------- the scenarios


def wait_done(peer: Peer, base: int, jobs: int, start: float, burst: bool) -> tuple[float, float]:
    """Poll ``peer.done()`` every 20 ms until ``base + jobs``; return (end, first done) perf_counter times.

    ``first`` is the first poll that saw more than ``base`` done."""
    first = None
    deadline = start + 60 + 0.05 * jobs
    while True:
        count = peer.done()
        now = time.perf_counter()
        if first is None and count > base:
            first = now
        if count >= base + jobs:
            return now, first
        all_exited = peer.check_workers(burst)
        if all_exited and peer.done() < base + jobs:
            raise RuntimeError(
                f"{peer.name}: workers exited with {peer.done() - base}/{jobs} done:\n{peer.logs_tail()}"
            )
        if now > deadline:
            raise TimeoutError(
                f"{peer.name}: {count - base}/{jobs} done after {now - start:.0f} s:\n{peer.logs_tail()}"
            )
        time.sleep(POLL_SECONDS)


def figures(
    peer: Peer, scenario: str, jobs: int, start: float, end: float, first: Optional[float], enqueue_seconds: float
) -> dict[str, Any]:
    """The result dict of one run (``first`` None: not measured)."""
    return {
        "peer": peer.name,
        "scenario": scenario,
        "handler": peer.handler,
        "workers": peer.workers,
        "jobs": jobs,
        "durability": peer.durability,
        "jobs_per_s": jobs / (end - start),
        "seconds": end - start,
        "first_done_s": None if first is None else first - start,
        "enqueue_per_s": jobs / enqueue_seconds if enqueue_seconds > 0 else float("inf"),
        "pool": peer.pool(),
        "settings": peer.settings(),
    }


def run_drain(cls: type, handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Enqueue ``jobs`` with no worker running, start the workers, time until all are done."""
    with cls(handler, workers, durability) as peer:
        t = time.perf_counter()
        for _ in range(jobs):
            peer.enqueue()
        enqueue_seconds = time.perf_counter() - t
        start = time.perf_counter()
        peer.start_workers(burst=True)
        end, first = wait_done(peer, 0, jobs, start, burst=True)
        peer.verify(jobs)
        return figures(peer, "drain", jobs, start, end, first, enqueue_seconds)


def run_stream(cls: type, handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Start the workers, warm them up, then time ``jobs`` enqueued one by one until all are done."""
    with cls(handler, workers, durability) as peer:
        peer.start_workers(burst=False)
        poll(lambda: peer.check_workers(False) or peer.ready(), 60, f"{peer.name} workers to register")
        warm = 2 * workers
        for _ in range(warm):
            peer.enqueue()
        wait_done(peer, 0, warm, time.perf_counter(), burst=False)
        base = peer.done()
        start = time.perf_counter()
        for _ in range(jobs):
            peer.enqueue()
        enqueue_seconds = time.perf_counter() - start
        end, _ = wait_done(peer, base, jobs, start, burst=False)
        peer.verify(base + jobs)
        # The first poll comes after the last enqueue, so the first job's time is not seen.
        return figures(peer, "stream", jobs, start, end, None, enqueue_seconds)


def huey_drain(handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Huey's drain figures (see ``drain``)."""
    return run_drain(HueyPeer, handler, workers, jobs, durability)


def huey_stream(handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Huey's stream figures (see ``stream``)."""
    return run_stream(HueyPeer, handler, workers, jobs, durability)


def rq_drain(handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """RQ's drain figures (see ``drain``)."""
    return run_drain(RqPeer, handler, workers, jobs, durability)


def rq_stream(handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """RQ's stream figures (see ``stream``)."""
    return run_stream(RqPeer, handler, workers, jobs, durability)


def celery_drain(handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Celery's drain figures (see ``drain``)."""
    return run_drain(CeleryPeer, handler, workers, jobs, durability)


def celery_stream(handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Celery's stream figures (see ``stream``)."""
    return run_stream(CeleryPeer, handler, workers, jobs, durability)


RUNS = {
    ("huey", "drain"): huey_drain,
    ("huey", "stream"): huey_stream,
    ("rq", "drain"): rq_drain,
    ("rq", "stream"): rq_stream,
    ("celery", "drain"): celery_drain,
    ("celery", "stream"): celery_stream,
}


def _run(peer: str, scenario: str, handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Dispatch to ``<peer>_<scenario>``."""
    if peer not in PEERS:
        raise ValueError(f"peer must be one of {PEERS}, not {peer!r}")
    return RUNS[peer, scenario](handler, workers, jobs, durability)


def drain(peer: str, handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Drain figures of ``peer``: ``jobs`` enqueued with no worker running, then ``workers``
    workers started; seconds from the workers' start to the last job done.

    Returns {"peer", "scenario", "handler", "workers", "jobs", "durability", "jobs_per_s",
    "seconds", "first_done_s", "enqueue_per_s", "pool", "settings"}; raises PeerUnavailable."""
    return _run(peer, "drain", handler, workers, jobs, durability)


def stream(peer: str, handler: str, workers: int, jobs: int, durability: str) -> dict[str, Any]:
    """Stream figures of ``peer``: ``workers`` workers running and idle, ``jobs`` enqueued one by
    one as fast as this process can; seconds from the first enqueue to the last job done.

    Returns the same dict as ``drain``; raises PeerUnavailable."""
    return _run(peer, "stream", handler, workers, jobs, durability)


# ---------------------------------------------------------------- command line


def csv(text: str, allowed: tuple) -> list:
    """Split a comma-separated option, checking each item against ``allowed``."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    bad = [item for item in items if item not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad} not in {allowed}")
    return items


def print_table(rows: list[dict[str, Any]]) -> None:
    """The figures as a table, then each peer's settings once."""
    head = (
        f"{'peer':<7} {'scenario':<8} {'dur':<6} {'handler':<8} {'wk':>3} {'jobs':>6} {'jobs/s':>9} "
        f"{'s':>7} {'1st done s':>10} {'enqueue/s':>10}  pool"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        where = (
            f"{r['peer']:<7} {r['scenario']:<8} {r['durability']:<6} {r['handler']:<8} {r['workers']:>3} {r['jobs']:>6}"
        )
        if "error" in r:
            print(f"{where} {r['error']}")
            continue
        first = "-" if r["first_done_s"] is None else f"{r['first_done_s']:.2f}"
        print(
            f"{where} {r['jobs_per_s']:>9,.0f} {r['seconds']:>7.2f} {first:>10} "
            f"{r['enqueue_per_s']:>10,.0f}  {r['pool']}"
        )
    print()
    seen = set()
    for r in rows:
        key = (r["peer"], r["durability"])
        if "settings" in r and key not in seen:
            seen.add(key)
            print(f"{r['peer']} {r['durability']}: {r['settings']}")


def main() -> int:
    """Run the matrix given on the command line and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per run (default 1000)")
    parser.add_argument(
        "--rq-jobs", type=int, default=300, help="jobs per RQ run (default 300: RQ runs some 20x slower than Huey)"
    )
    parser.add_argument("--workers", type=lambda s: [int(w) for w in s.split(",")], default=[16])
    parser.add_argument("--handlers", type=lambda s: csv(s, HANDLERS), default=list(HANDLERS))
    parser.add_argument("--peers", type=lambda s: csv(s, PEERS), default=list(PEERS))
    parser.add_argument("--scenarios", type=lambda s: csv(s, SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--durability", type=lambda s: csv(s, DURABILITIES), default=list(DURABILITIES))
    parser.add_argument("--rq-launch", choices=("pool", "workers"), default=RQ_LAUNCH)
    parser.add_argument("--rq-worker-class", default=RQ_WORKER_CLASS)
    args = parser.parse_args()
    globals().update(RQ_LAUNCH=args.rq_launch, RQ_WORKER_CLASS=args.rq_worker_class)

    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    print(
        f"{args.jobs:,} jobs per run ({args.rq_jobs:,} for RQ); {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}\n"
    )
    rows: list[dict[str, Any]] = []
    unavailable: dict[str, str] = {}
    started = time.monotonic()
    for peer in args.peers:
        for durability in args.durability:
            for scenario in args.scenarios:
                for handler in args.handlers:
                    for workers in args.workers:
                        jobs = args.rq_jobs if peer == "rq" else args.jobs
                        where = dict(
                            peer=peer,
                            scenario=scenario,
                            handler=handler,
                            workers=workers,
                            durability=durability,
                            jobs=jobs,
                        )
                        if peer in unavailable:
                            continue
                        t = time.monotonic()
                        try:
                            row = _run(peer, scenario, handler, workers, jobs, durability)
                        except PeerUnavailable as exc:
                            unavailable[peer] = exc.reason
                            print(f"{peer}: not available: {exc.reason}", file=sys.stderr)
                            continue
                        except Exception as exc:  # one broken run is reported, the rest go on
                            row = dict(where, error=f"failed: {type(exc).__name__}: {exc}".split("\n")[0])
                            print(f"{peer} {scenario} {durability} {handler} x{workers}: {exc}", file=sys.stderr)
                        rows.append(row)
                        print(
                            f"  {peer} {scenario} {durability} {handler} x{workers}: "
                            f"{row.get('jobs_per_s', 0):,.0f} jobs/s ({time.monotonic() - t:.1f} s)",
                            file=sys.stderr,
                            flush=True,
                        )
    print_table(rows)
    for peer, reason in unavailable.items():
        print(f"{peer}: not available: {reason}")
    left = survivors()
    print(
        f"\n{len(rows)} runs in {time.monotonic() - started:.0f} s (load now {os.getloadavg()[0]:.1f}); "
        + (f"SURVIVING processes (session: pids): {left}" if left else "no worker or redis process survives")
    )
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
