"""A node's document leases are renewed whatever else its doc processor
does: starting many jobs (each a process, tens of milliseconds) must not
delay the renewals past the owner timeout, or the node's own activity
monitor re-enqueues documents it runs and another node would run them too.
"""
from __future__ import annotations

import pytest

import fdblayer
from actors import docs

from .jobs_fixtures import wait_until
from .test_docs_failover import IDLE, OWNER_TIMEOUT, CliNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

N_DOCS = 200  # ~60 ms a job process: seconds of starts, past the 2 s owner timeout


def test_leases_are_renewed_while_many_jobs_start(tmp_path):
    url = f"sqlite:///{tmp_path}/store.db"
    db = fdblayer.open(url)
    node = CliNode(url, tmp_path, "a", max_jobs=N_DOCS)
    try:
        node.wait_up()
        ids = [f"d{i:03d}" for i in range(N_DOCS)]
        for doc_id in ids:
            docs.put(db, "_replicator", doc_id, {"handler": IDLE, "continuous": True})
        wait_until(lambda: node.doc_ids() == ids, 90, "every document to run", step=0.2)
        wait_until(lambda: all(d.state == "running" for d in docs.list_docs(db, "_replicator", limit=1000)[1]),
                   30, "every state recorded", step=0.2)
        log = node.log.read_text()
        assert "job_reenqueued" not in log, "a document of a live node was re-enqueued:\n" + log[-3000:]
        owners = {d.node for d in docs.list_docs(db, "_replicator", limit=1000)[1]}
        assert len(owners) == 1
    finally:
        if node.proc.poll() is None:
            node.kill()
        db.close()
