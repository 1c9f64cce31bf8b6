"""What the buffered transactions (SQLite and PostgreSQL) do alike: the
versionstamp future and the watches.

Both buffer their writes until ``commit``; the future of the versionstamp
is handed out before, resolved by the commit (or failed by a cancel), and
a watch is armed only when its transaction commits. The transaction sets
``_stamp`` (None), ``_watches`` ([]) and ``_closed`` (None until it
commits or is cancelled) and provides ``_ensure_usable()``.
"""

from __future__ import annotations

from typing import List, Optional

from fdblayer.exceptions import InvalidTransactionState
from fdblayer.interface import VersionstampFuture, check_key
from fdblayer.watches import Watch

__all__ = ["StampAndWatches"]


class StampAndWatches:
    """``get_versionstamp`` and ``watch`` of a buffered transaction (a mixin)."""

    _stamp: Optional[VersionstampFuture]
    _watches: List[Watch]
    _closed: Optional[str]

    def _ensure_usable(self) -> None:
        raise NotImplementedError

    def get_versionstamp(self) -> VersionstampFuture:
        """The future of this transaction's versionstamp (ask before ``commit``)."""
        if self._stamp is None:
            self._stamp = VersionstampFuture()
            if self._closed is not None:
                self._stamp.set_exception(InvalidTransactionState("get_versionstamp() must be called before commit"))
        return self._stamp

    def watch(self, key: bytes) -> Watch:
        """A watch on ``key``, armed when this transaction commits."""
        self._ensure_usable()
        watch = Watch(check_key(key))
        self._watches.append(watch)
        return watch
