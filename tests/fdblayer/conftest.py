"""Fixtures of the store-layer tests (also used by the jobs data-model tests).

- ``db``: a fresh ``fdblayer.Database`` per test, parametrized over the
  backends: ``sqlite`` (a real file ``store.db`` in ``tmp_path``, never an
  in-memory stand-in), ``postgres`` (a fresh table prefix on the session's
  throwaway PostgreSQL server, see ``tests/conftest.py``), ``postgres-apart`` (the
  same with ``flush=apart``: commits flushed after their locks are released; that
  server does not wait for flushes, so these check the commit pipeline and its
  errors, and ``test_postgres_flush_apart.py`` the flush on a durable server) and
  ``fdb`` (FoundationDB under a fresh random prefix;
  skipped with the reason, e.g. "FoundationDB client library libfdb_c not
  found: ...", where the library or a cluster is absent). Closed after the test.
- ``store_url``: the URL of that same store, for subprocesses and for a second
  handle (``fdblayer.open(store_url)``).
- ``sqlite_url`` / ``sqlite_db``: the SQLite store only, for tests of that backend.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

import fdblayer
from fdblayer.exceptions import StoreUnavailable

BACKENDS = ("sqlite", "postgres", "postgres-apart", "fdb")


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """The URL of a fresh, empty store of each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/store.db"
        return
    if request.param == "postgres":
        yield request.getfixturevalue("pg_url")
        return
    if request.param == "postgres-apart":
        yield request.getfixturevalue("pg_url") + "&flush=apart"
        return
    url = f"fdb://?prefix=otpjobs-test-{uuid.uuid4().hex}"
    try:
        probe = fdblayer.open(url)
        probe.ping()  # type: ignore[attr-defined]
    except StoreUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        probe.clear_all()  # type: ignore[attr-defined]
        probe.close()


@pytest.fixture
def db(store_url: str) -> Iterator[fdblayer.Database]:
    """A fresh database handle on ``store_url``, closed after the test."""
    handle = fdblayer.open(store_url)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """The URL of a fresh SQLite store file in ``tmp_path``."""
    return f"sqlite:///{tmp_path}/store.db"


@pytest.fixture
def sqlite_db(sqlite_url: str) -> Iterator[fdblayer.Database]:
    """A handle on a fresh SQLite store, closed after the test."""
    handle = fdblayer.open(sqlite_url)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The read statements PostgreSQL transactions send from now on, counted
    at the transaction's read call (each is one round trip)."""
    from fdblayer.backends import postgres_transaction

    count: list[str] = []
    original = postgres_transaction.PostgresTransaction._query

    def counted(self, sql, params, *args, **kwargs):
        count.append(sql)
        return original(self, sql, params, *args, **kwargs)

    monkeypatch.setattr(postgres_transaction.PostgresTransaction, "_query", counted)
    return count
