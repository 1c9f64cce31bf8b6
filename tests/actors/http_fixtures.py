"""A real node with the scheduler tree and the HTTP listener, for the HTTP tests."""

from __future__ import annotations

import json
import tempfile
import urllib.error
import urllib.request
from typing import Any

from actors.settings.config import DEFAULTS, Config
from actors.http.server import HTTP_SERVER_NAME, GetHttpInfo, http_children
from actors.node.root import ROOT_FLAGS
from actors.scheduler.client import SchedulerClient
from actors.scheduler.sup import scheduler_children
from supervision import start_node
from tests.procs import free_port, group_pids, wait_until  # noqa: F401 - the HTTP tests import them from here

FIX = "tests.actors.scheduler_fixtures"


class Response:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


class HttpNode:
    """A started node; ``request`` speaks plain HTTP to its listener."""

    def __init__(self, config: Config, config_path: str | None = None, secret: str | None = None) -> None:
        self.port = free_port()
        self.http_port = free_port()
        config.set("node", "port", self.port)
        config.set("node", "http_port", self.http_port)
        if not config.get("replicator", "handlers"):  # the test handlers (the job policy allows none by default)
            config.set("replicator", "handlers", FIX)
        if config.get("node", "store") == DEFAULTS["node"]["store"]:  # never a file in the working directory
            self.store_dir = tempfile.mkdtemp(prefix="httpnode-")
            config.set("node", "store", f"sqlite:///{self.store_dir}/store.db")
        self.secret = secret
        self.node = start_node(
            self.port,
            ROOT_FLAGS,
            scheduler_children(config) + http_children(config, config_path=config_path, secret=secret),
        )
        self.client = self.node.client()
        self.s = SchedulerClient(self.client)
        self.url = f"http://127.0.0.1:{self.http_port}"

    def request(
        self, method: str, path: str, body: Any = None, headers: dict | None = None, timeout: float = 10.0
    ) -> Response:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if data is not None and "Content-Type" not in (headers or {}):
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return Response(resp.status, resp.headers, resp.read())
        except urllib.error.HTTPError as exc:
            return Response(exc.code, exc.headers, exc.read())

    def http_info(self) -> dict:
        return self.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 5.0)

    def handler_job(self, job_id: str, handler: str = "idle", **extra) -> dict:
        return dict({"id": job_id, "handler": f"{FIX}:{handler}", "continuous": True}, **extra)

    def stop(self) -> None:
        pgid = self.node.pgid
        self.node.stop()
        wait_until(lambda: not group_pids(pgid), 10, "no process of the node left")
