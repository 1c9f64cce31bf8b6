"""A PostgreSQL commit sent, its answer not yet read (what
``PostgresTransaction.start_commit`` returns).

Principle: the transaction sends its commit function in one round trip
(:func:`~fdblayer.backends.postgres_direct.send`); this handle waits for
the answer when asked, then lets the transaction end as a commit does
(its versionstamp resolved, its watches armed). What a caller can rely
on is ``Transaction.start_commit``'s contract.
"""

from __future__ import annotations

from typing import Any, Optional

from fdblayer.interface import CommitInFlight

__all__ = ["CommitSent"]


class CommitSent(CommitInFlight):
    """A commit in flight on one transaction's connection (``sent`` None:
    the transaction wrote nothing, and ended at once)."""

    __slots__ = ("_tr", "_sent", "_note", "_watched")

    def __init__(self, tr: Any, sent: Any, note: str, watched: Optional[list[Any]]) -> None:
        self._tr, self._sent, self._note, self._watched = tr, sent, note, watched
        if sent is None:
            tr._committed(None, note, watched)

    def fileno(self) -> Optional[int]:
        """The connection's socket; None when there is no answer to wait for."""
        return None if self._sent is None else int(self._sent.fileno())

    def finish(self) -> None:
        """Wait for the answer and end the transaction; raises what
        ``commit`` raises."""
        sent, self._sent = self._sent, None
        if sent is not None:
            self._tr._committed(self._tr._commit_answer(sent), self._note, self._watched)
