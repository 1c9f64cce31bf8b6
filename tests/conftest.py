"""Fixtures shared by every test directory.

- ``pg_server``: one throwaway PostgreSQL server for the whole session
  (``fdblayer.backends.postgres_server``: initdb in a temporary directory, loopback
  only, stopped and removed at the end). Where Debian's ``postgresql``
  binaries are missing, the tests that need it skip with that reason;
  ``.ci/run`` installs them, so CI always runs them.
- ``pg_url``: the URL of a fresh, empty store on that server (a new table
  prefix per test, dropped after it).
- ``durable_pg_server``: a server of the test's own with ``fsync`` on, for
  tests that crash it (``kill("immediate")``) or change its grants.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

import fdblayer
from fdblayer.backends.postgres_server import ServerUnavailable, TemporaryServer


def running(server: TemporaryServer) -> Iterator[TemporaryServer]:
    """Start ``server`` (skipping the test with the reason where it cannot
    start), yield it, stop it: the body of the server fixtures."""
    try:
        server.start()
    except ServerUnavailable as exc:
        server.stop()
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TemporaryServer]:
    """A PostgreSQL server for the session (skips where none can start)."""
    yield from running(TemporaryServer())


@pytest.fixture
def durable_pg_server() -> Iterator[TemporaryServer]:
    """A durable server of the test's own (commits survive its crash); skips where none can start."""
    yield from running(TemporaryServer(durable=True))


@pytest.fixture
def pg_url(pg_server: TemporaryServer) -> Iterator[str]:
    """The URL of a fresh store on the session's server (its tables dropped after)."""
    url = pg_server.url(prefix=f"t{uuid.uuid4().hex[:12]}")
    yield url
    try:
        handle = fdblayer.open(url)
    except fdblayer.StoreError:  # the test stopped the server for good
        return
    try:
        handle.drop()  # type: ignore[attr-defined]
    finally:
        handle.close()
