"""What the hostile tests compare: every row of a SQLite store, read raw.

The store is read with the standard library's ``sqlite3`` (not through
``fdblayer``), so a bug in the product's read path cannot hide a write:
the ``kv`` table (every key and value, in key order), the ``meta`` table
(``commit_version``, bumped by every versionstamped commit) and the
modification time of ``<file>-notify`` (touched by every write commit of
any process).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, Callable

import pytest

from fdblayer.jobs.exceptions import JobsError


class StoreFile:
    """A SQLite store file, dumped raw."""

    def __init__(self, path: str) -> None:
        self.path = str(path)
        # NORMAL: as durable against a crash of the process, and several times faster per commit.
        self.url = f"sqlite:///{self.path}?synchronous=NORMAL"
        self._conn: sqlite3.Connection | None = None

    def rows(self) -> tuple[list, list] | None:
        """``(kv rows, meta rows)`` read in one snapshot, or None while there is no store."""
        if self._conn is None:
            if not os.path.exists(self.path):
                return None
            # Read-only, autocommit: no snapshot is held between two dumps.
            self._conn = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            )
        conn = self._conn
        try:
            conn.execute("BEGIN")
            kv = conn.execute("SELECT k, v FROM kv ORDER BY k").fetchall()
            meta = conn.execute("SELECT name, value FROM meta ORDER BY name").fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # created, schema not yet committed
                return None
            raise
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")
        return kv, meta

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def notify_stamp(self) -> int | None:
        try:
            return os.stat(self.path + "-notify").st_mtime_ns
        except FileNotFoundError:
            return None

    def snapshot(self) -> tuple[Any, Any]:
        return self.rows(), self.notify_stamp()


def unchanged(store: StoreFile, call: Callable[[], Any], error: type[BaseException] = JobsError) -> BaseException:
    """Run ``call``: it must raise ``error`` (with a message) and leave ``store`` as it was."""
    before = store.snapshot()
    with pytest.raises(error) as info:
        call()
    after = store.snapshot()
    assert after[0] == before[0], f"{error.__name__} but the store's rows changed"
    assert after[1] == before[1], f"{error.__name__} but a write transaction committed"
    assert str(info.value), "the error has a message"
    return info.value


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values, with bool, int and float told apart (1 != 1.0 != True)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return type(b) is dict and a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return type(b) is list and len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and type(b) is float and (a == b) and str(a) == str(b)  # -0.0 stays -0.0
    if isinstance(a, int) and isinstance(b, int):
        return type(b) is int and a == b
    if isinstance(a, str) and isinstance(b, str):
        return type(b) is str and a == b
    return a is None and b is None
