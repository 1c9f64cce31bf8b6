"""A store of many job types: the jobs server starts two processes a type,
and must not hold the queue tree's start until all of them run.

Found by a scale review: a node on a store of some 260 types or more
failed its start (``couch_jobs_sup`` past its start timeout, exit status
1), at every start, so a service manager restarted it for ever.
"""

from __future__ import annotations

import pytest

import fdblayer
from actors import jobs
from actors.names import ACTIVITY_MONITOR_SUP, NOTIFIER_SUP

from .jobs_fixtures import QueueNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TYPES = 40


def test_the_queue_tree_starts_before_its_per_type_actors_and_then_serves_them_all(tmp_path):
    url = f"sqlite:///{tmp_path}/store.db"
    db = fdblayer.open(url)
    for n in range(TYPES):
        jobs.set_type_timeout(db, ("many", n), 30)
    node = QueueNode(url)
    try:
        node.wait_tree_up(TYPES, timeout=120)
        node.restart_app()  # answered once couch_jobs_sup and its jobs server have started
        started = len(node.kids(NOTIFIER_SUP))
        assert started < TYPES, "the tree's start waited for every type's notifier and monitor"
        node.wait_tree_up(TYPES, timeout=120)
        assert len(node.kids(ACTIVITY_MONITOR_SUP)) == TYPES
        assert node.notifier_for(("many", TYPES - 1)) is not None
    finally:
        node.stop()
        db.close()
