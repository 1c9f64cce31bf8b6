"""Fixtures of the hostile tests: ``n``, one real node per module (no admin configured)."""

from __future__ import annotations

import pytest

from .node import HostileNode


@pytest.fixture(scope="module")
def n(tmp_path_factory):
    node = HostileNode(tmp_path_factory.mktemp("hostile-node"), max_jobs=0)
    try:
        node.couch_jobs = node.get("/_node/_local/_config/couch_jobs")
        yield node
    finally:
        node.stop()


@pytest.fixture(autouse=True)
def nothing_crashed(request):
    """After each test of a module with a node: nothing of the node was restarted."""
    yield
    if "n" in request.fixturenames:
        request.getfixturevalue("n").check(everything=True)
