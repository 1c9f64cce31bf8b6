"""Fixtures of the worker tests: a store file, a handler module, hosts that are always stopped."""

from __future__ import annotations

import os

import pytest

import fdblayer
from tests.workers.hosts import Host, write_handlers


@pytest.fixture
def workdir(tmp_path):
    write_handlers(tmp_path)
    os.environ.setdefault("THESPLOG_FILE", str(tmp_path / "thespian.log"))
    return tmp_path


@pytest.fixture
def store_url(workdir):
    return f"sqlite:///{workdir}/store.db?synchronous=NORMAL"


@pytest.fixture
def db(store_url):
    handle = fdblayer.open(store_url)
    yield handle
    handle.close()


@pytest.fixture
def hosts(workdir, store_url):
    """``hosts(assignments, **kw)`` starts a host and waits until its pool is up;
    every host is stopped (and its processes checked gone) at the end."""
    started: list[Host] = []

    def start(assignments, name=None, wait=True, **kw):
        host = Host(workdir, kw.pop("store", store_url), assignments, name=name or f"host{len(started)}", **kw)
        started.append(host)
        return host.wait_up() if wait else host

    yield start
    for host in started:
        host.close()
