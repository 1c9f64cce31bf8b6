"""Helpers of the queue tests (importable by the node's processes and by workers).

- :class:`QueueNode`: a real node running the queue tree (``root_children``)
  on a real SQLite file, with small ``[couch_jobs]`` values; ``restart_app``
  stops and starts ``couch_jobs_sup`` through the node supervisor (the
  seed's ``application:stop/start``), which also resets its restart
  intensity; ``stop`` asserts that no process of the node's group is left.
- :class:`SubscriberActor`: a "client actor" that subscribes with
  ``actors.jobs.subscribe_task`` and collects the JobEvents reaching
  ``handle_info``.
- Worker processes: ``python -m tests.actors.jobs_fixtures <mode> ...``
  (see :func:`main`), started with :func:`spawn_worker`.
- ``wait_until``, ``free_port``, ``group_pids``, ``dump``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from actors import jobs
from actors.queue.protocol import JobEvent
from fdblayer.jobs import JobState
from supervision import NOREPLY, GenServer
from tests import procs
from tests.procs import free_port, group_pids, pid_alive  # noqa: F401 - re-exported to the queue tests

ROOT = Path(__file__).resolve().parents[2]

#: Small [couch_jobs] values so the tests never wait for the seed's defaults.
FAST_COUCH_JOBS = {
    "type_check_period_msec": 500,
    "type_check_max_jitter_msec": 100,
    "activity_monitor_max_jitter_msec": 50,
    "type_monitor_holdoff_msec": 50,
    "type_monitor_timeout_msec": "infinity",
}


def wait_until(predicate, timeout: float = 15.0, what: str = "condition", step: float = 0.02):
    """Poll until truthy; any error while the tree restarts counts as "not yet"."""
    return procs.wait_until(predicate, timeout, what, step, ignore=(Exception,))


def dump(db) -> list:
    """Every key and value of the store."""
    return [(kv.key, kv.value) for kv in db.get_range(b"", b"\xff")]


def clear_store(db) -> None:
    tr = db.create_transaction()
    tr.clear_range(b"", b"\xff")
    tr.commit()


def queue_config(store_url: str, **couch_jobs: Any):
    from actors.settings.config import load

    values = dict(FAST_COUCH_JOBS, **couch_jobs)
    overrides = {("node", "store"): store_url}
    overrides.update({("couch_jobs", k): v for k, v in values.items()})
    return load(None, overrides)


class QueueNode:
    """A node with the queue tree on ``store_url`` (started in this process)."""

    def __init__(
        self, store_url: str, port: int | None = None, extra_specs: list | None = None, **couch_jobs: Any
    ) -> None:
        import fdblayer
        from actors.node.root import ROOT_FLAGS, root_children
        from supervision import start_node

        self.store_url = store_url
        self.port = port or free_port()
        self.config = queue_config(store_url, **couch_jobs)
        self.config.set("node", "port", self.port)
        self.config.set("node", "http_port", 0)  # any free port: no race with other listeners
        # The doc processor owns a reserved job type of its own; these tests
        # count the per-type actors of their own types only.
        specs = [s for s in root_children(self.config) if s.id != "doc_processor"]
        self.node = start_node(
            self.port,
            ROOT_FLAGS,
            specs + list(extra_specs or []),
            level=int(os.environ.get("JOBS_TEST_LOG_LEVEL", "30")),
        )
        self.pgid = self.node.pgid
        self.client = self.node.client()
        self.db = fdblayer.open(store_url)

    # ------------------------------------------------------------ tree views
    def pid(self, name_or_addr: Any) -> int:
        return self.client.get_pid(name_or_addr)

    def kids(self, sup: Any) -> list:
        """Live children (ChildInfo rows with an address) of ``sup``."""
        return [c for c in self.client.which_children(sup) if c.addr is not None]

    def kid_pids(self, sup: Any) -> list[int]:
        return sorted(self.client.get_pid(c.addr) for c in self.kids(sup))

    def tree_pids(self) -> dict:
        """pid of each named actor of the queue tree (KeyError-free: None if absent)."""
        from actors.names import ACTIVITY_MONITOR_SUP, JOBS_SERVER, JOBS_SUP, NOTIFIER_SUP

        out = {}
        for key, name in (
            ("jobs_sup", JOBS_SUP),
            ("am_sup", ACTIVITY_MONITOR_SUP),
            ("notifier_sup", NOTIFIER_SUP),
            ("server", JOBS_SERVER),
        ):
            addr = self.client.whereis(name)
            out[key] = None if addr is None else self.client.get_pid(addr)
        return out

    def force_check_types(self) -> None:
        from actors.queue.protocol import ForceCheckTypes
        from actors.names import JOBS_SERVER

        assert self.client.call(JOBS_SERVER, ForceCheckTypes(), 15.0) == "ok"

    def notifier_for(self, job_type: Any) -> Any:
        from actors.queue.protocol import GetNotifierServer
        from actors.names import JOBS_SERVER

        return self.client.call(JOBS_SERVER, GetNotifierServer(job_type), 10.0)

    def wait_tree_up(self, n_types: int | None = None, timeout: float = 30.0) -> dict:
        """Wait until every named actor answers (and ``n_types`` monitors/notifiers run)."""
        from actors.names import ACTIVITY_MONITOR_SUP, NOTIFIER_SUP

        def up():
            pids = self.tree_pids()
            if None in pids.values():
                return None
            self.force_check_types()
            if n_types is not None and (
                len(self.kids(ACTIVITY_MONITOR_SUP)) != n_types or len(self.kids(NOTIFIER_SUP)) != n_types
            ):
                return None
            return pids

        return wait_until(up, timeout, "the queue tree to be up", step=0.05)

    def restart_app(self) -> None:
        """The seed's restart_app: stop couch_jobs_sup, start it again."""
        self.client.terminate_child(self.client.node, "couch_jobs_sup")
        self.client.restart_child(self.client.node, "couch_jobs_sup")

    def stop(self) -> None:
        """Stop the node and assert that none of its processes is left."""
        try:
            self.db.close()
        finally:
            self.node.stop()
            wait_until(lambda: not group_pids(self.pgid), 15, "no process of the node left")


def serving_node(tmp_path_factory: Any, name: str, job_type: Any, timeout: float):
    """A module's shared node (a generator for a module-scoped fixture) on
    its own SQLite store, ``job_type`` given ``timeout`` and its actors up."""
    node = QueueNode(f"sqlite:///{tmp_path_factory.mktemp(name)}/store.db")
    try:
        jobs.set_type_timeout(node.db, job_type, timeout)
        node.wait_tree_up(n_types=1)
        yield node
    finally:
        node.stop()


# ------------------------------------------------------------ client actor


class SubscriberActor(GenServer):
    """A client actor: subscribes with subscribe_task, collects events in handle_info.

    args: ``{"store": url}``. Calls: ``("subscribe", type, id)`` ->
    ``(ref | None, state, data)`` or the JobsError raised; ``"events"`` ->
    list of ``(id, state, data)``.
    """

    def init(self, args: Any) -> None:
        import fdblayer

        self.db = fdblayer.open(args["store"])
        self.events: list = []

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, tuple) and msg[0] == "subscribe":
            self.run_task(self._subscribe(msg[1], msg[2]), lambda result: self.reply(from_, result))
            return NOREPLY
        if msg == "events":
            return list(self.events)
        return super().handle_call(msg, from_)

    def _subscribe(self, job_type: Any, job_id: str):
        try:
            sub, state, data = yield from jobs.subscribe_task(self, self.db, job_type, job_id)
        except jobs.JobsError as exc:
            return exc
        return (None if sub is None else sub.ref), JobState(state).value, data

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, JobEvent):
            self.events.append((msg.id, msg.state, msg.data))
        else:
            super().handle_info(msg)

    def terminate(self, reason: Any) -> None:
        self.db.close()


# ------------------------------------------------------------ worker processes


def spawn_worker(mode: str, store_url: str, job_type: Any, *args: str) -> subprocess.Popen:
    """Start a worker process (its own process group, so a test can SIGKILL it)."""
    cmd = [sys.executable, "-m", "tests.actors.jobs_fixtures", mode, store_url, json.dumps(job_type), *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def read_line(proc: subprocess.Popen, timeout: float = 60.0) -> dict:
    """The next JSON line a worker prints (fails on timeout or exit)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise AssertionError(f"worker {proc.pid} printed nothing in {timeout}s")
        line = proc.stdout.readline()
    finally:
        sel.unregister(proc.stdout)
    if not line:
        proc.wait(5)
        raise AssertionError(f"worker {proc.pid} exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
    return json.loads(line)


def kill_worker(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def _as_type(value: Any) -> Any:
    return tuple(_as_type(v) for v in value) if isinstance(value, list) else value


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Worker modes (store URL and JSON type first):

    - ``hold``: accept one job, print ``{"id", "lock"}``, then update it every 0.1 s until killed.
    - ``accept``: accept one job (``--timeout``), print ``{"id", "lock", "data", "t"}``
      (``t``: time.time() when accept returned) or ``{"error": name}``, exit.
    - ``loop``: accept -> finish until no job comes for ``--idle`` seconds;
      each finished id is appended to ``--ledger``; prints ``{"done": n}``.
    """
    import fdblayer
    from actors import jobs

    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["hold", "accept", "loop"])
    parser.add_argument("store")
    parser.add_argument("type")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=2.0)
    parser.add_argument("--ledger")
    opts = parser.parse_args(argv)
    job_type = _as_type(json.loads(opts.type))
    db = fdblayer.open(opts.store)
    if opts.mode in ("hold", "accept"):
        _emit({"ready": os.getpid()})
        try:
            job, data = jobs.accept(db, job_type, timeout=opts.timeout)
        except jobs.JobsError as exc:
            _emit({"error": type(exc).__name__})
            return 1
        _emit({"id": job.id, "lock": job.lock, "data": data, "t": time.time()})
        if opts.mode == "hold":
            while True:  # a live worker: heartbeat (update) so only its death makes it silent
                time.sleep(0.1)
                job = jobs.update(db, job)
        return 0
    done = 0
    ledger = open(opts.ledger, "a") if opts.ledger else None
    _emit({"ready": os.getpid()})
    while True:
        try:
            job, _ = jobs.accept(db, job_type, timeout=opts.idle)
        except jobs.NotFound:
            break
        try:
            jobs.finish(db, job, {"by": os.getpid()})
        except jobs.Halt:
            continue  # re-enqueued meanwhile; someone else will finish it
        done += 1
        if ledger:
            ledger.write(f"{job.id}\n")
            ledger.flush()
    _emit({"done": done})
    return 0


if __name__ == "__main__":
    sys.exit(main())
