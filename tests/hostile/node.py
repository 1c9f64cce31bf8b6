"""A real node for the hostile HTTP tests: the node's tree (the queue, the scheduler, the HTTP listener).

No doc processor: documents written over HTTP stay as written (nobody runs
them), so the store changes only when a request writes. ``stop`` waits until
no process of the node's group is left.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import fdblayer
from actors.settings.config import Config
from actors.http.server import HTTP_SERVER_NAME, GetHttpInfo, http_children
from actors.names import JOBS_SERVER, JOBS_SUP, SCHEDULER
from actors.node.root import ROOT_FLAGS, root_children
from actors.scheduler.client import SchedulerClient
from fdblayer import docs
from supervision import start_node
from tests.procs import free_port, group_pids, listening_addresses, wait_until

from .http import describe, request
from .store import StoreFile

#: The handler of the jobs the tests add (runs until stopped, does nothing).
IDLE = "tests.actors.scheduler_fixtures:idle"
#: The one document the store holds between examples.
SEED = {"handler": IDLE, "continuous": True}


class HostileNode:
    """A started node, its store and what each example must leave as it found it.

    ``max_jobs = 0`` keeps accepted jobs waiting in the scheduler's table
    (no job actor starts) unless a test raises it.
    """

    def __init__(
        self, directory: Path, config_path: str | None = None, secret: str | None = None, max_jobs: int = 10
    ) -> None:
        self.store = StoreFile(directory / "store.db")
        self.port = free_port()
        self.http_port = free_port()
        self.auth: dict = {}
        config = Config()
        config.set("node", "port", self.port)
        config.set("node", "http_port", self.http_port)
        config.set("node", "store", self.store.url)
        config.set("replicator", "max_jobs", max(1, max_jobs))  # 0 is for run time only
        config.set("replicator", "handlers", IDLE.partition(":")[0])  # the job policy allows no handler by default
        # The node's own tree but the doc processor, and the listener with this node's admins and secret.
        specs = [spec for spec in root_children(config) if spec.id not in ("doc_processor", "http_server")]
        specs += http_children(config, config_path=config_path, secret=secret)
        self.node = start_node(self.port, ROOT_FLAGS, specs, level=logging.WARNING)
        self.pgid = self.node.pgid
        try:
            self.client = self.node.client()
            self.s = SchedulerClient(self.client)
            if max_jobs == 0:
                self.s.set_setting("max_jobs", 0)
            self.settings = self.s.settings()
            self.scheduler = self.scheduler_pid()
            self.pids = self.actor_pids()
            self.db = fdblayer.open(self.store.url)
            docs.put(self.db, docs.REPLICATOR_DB, "seed", SEED)
        except BaseException:
            self.stop()
            raise

    def get(self, path: str) -> Any:
        reply = request(self.http_port, "GET", path, headers=self.auth)
        assert reply.status == 200, describe(reply)
        return reply.json()

    def http_info(self) -> dict:
        return self.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 5.0)

    def scheduler_pid(self) -> int:
        return self.client.get_pid(SCHEDULER)

    def actor_pids(self) -> dict:
        """OS pids of the long-lived actors and of the HTTP process."""
        pids = {name: self.client.get_pid(name) for name in (JOBS_SUP, JOBS_SERVER)}
        pids["http"] = self.http_info()["pid"]
        return pids

    def check(self, everything: bool = False) -> None:
        """The node still serves and its scheduler was never restarted; with ``everything``,
        neither were the queue's actors and the HTTP process (nothing crashed)."""
        up = request(self.http_port, "GET", "/_up")
        assert up.status == 200 and up.json() == {"status": "ok", "seeds": {}}, describe(up)
        assert self.scheduler_pid() == self.scheduler, "the scheduler was restarted (it crashed)"
        if everything:
            assert self.actor_pids() == self.pids, "an actor or the HTTP process was restarted (it crashed)"

    def undo(self, before: Any = None, couch_jobs: dict | None = None) -> None:
        """Put back what a valid write changed: jobs, [replicator] settings, [couch_jobs]
        values (when ``couch_jobs`` gives them), documents (unless the rows are as ``before``)."""
        for job in self.s.jobs():
            self.s.remove_job(job["id"])
        now = self.s.settings()
        for key, value in self.settings.items():
            if now.get(key) != value:
                self.s.set_setting(key, value)
        if couch_jobs is not None:
            current = self.get("/_node/_local/_config/couch_jobs")
            for key, value in couch_jobs.items():
                if current.get(key) != value:
                    reply = request(
                        self.http_port, "PUT", f"/_node/_local/_config/couch_jobs/{key}", value, headers=self.auth
                    )
                    assert reply.status == 200, describe(reply)
        if before is not None and self.store.snapshot()[0] == before[0]:
            return
        for doc in docs.list_docs(self.db)[1]:
            if (doc.db_name, doc.doc_id) != (docs.REPLICATOR_DB, "seed"):
                docs.delete(self.db, doc.db_name, doc.doc_id)
        try:
            docs.get(self.db, docs.REPLICATOR_DB, "seed")
        except docs.NotFound:  # a valid DELETE of the seed: put it back
            docs.put(self.db, docs.REPLICATOR_DB, "seed", SEED)

    def listening(self) -> set[str]:
        return listening_addresses(group_pids(self.pgid))

    def stop(self) -> None:
        try:
            self.node.stop()
        finally:
            if hasattr(self, "db"):
                self.db.close()
            self.store.close()
            wait_until(lambda: not group_pids(self.pgid), 15, "no process of the node left")
