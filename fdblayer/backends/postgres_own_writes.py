"""A PostgreSQL transaction's own writes as its reads see them (a mixin of
:class:`~fdblayer.backends.postgres_transaction.PostgresTransaction`).

Principle: writes stay in the transaction's buffer until commit, yet every
read sees them. A range read merges the buffer into the snapshot's rows:
a cleared range hides rows, a set or cleared key replaces its row, and a
key with pending adds shows its row plus the adds. A chunked read (a limit
that had to skip buffered keys) merges chunk by chunk, each buffered key
entering only once the chunk covering it was read, so order and limits
hold.

The buffer it reads (owned by the transaction): ``_sets`` (key -> value,
None when cleared), ``_adds`` (key -> ``[[width, sum], ...]``) and
``_cleared`` (ranges).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from fdblayer.limits import apply_adds
from fdblayer.selectors import KeyValue

__all__ = ["OwnWrites"]


class OwnWrites:
    """The buffer-over-snapshot view of a transaction."""

    _sets: Dict[bytes, Optional[bytes]]
    _adds: Dict[bytes, List[List[int]]]
    _cleared: List[Tuple[bytes, bytes]]

    def _in_cleared(self, key: bytes) -> bool:
        return any(b <= key < e for b, e in self._cleared)

    def _overlay(self, low: bytes, high: bytes) -> Dict[bytes, Optional[bytes]]:
        """Buffered keys in ``[low, high)``: set value, None (cleared) or ``...`` (adds)."""
        overlay: Dict[bytes, Any] = {k: v for k, v in self._sets.items() if low <= k < high}
        for key in self._adds:
            if low <= key < high:
                overlay[key] = ...
        return overlay

    def _merge(
        self,
        rows: List[KeyValue],
        db_rows: List[Tuple[bytes, bytes]],
        overlay: Dict[bytes, Any],
        low: bytes,
        high: bytes,
        reverse: bool,
        final: bool,
    ) -> List[KeyValue]:
        """Add to ``rows`` the view of one chunk of snapshot rows in ``[low, high)``.

        Snapshot rows in cleared ranges or overwritten are dropped; buffered
        keys come in where they sort. A chunk that is not the last one covers
        keys up to its last row only, so buffered keys past it wait.
        """
        merged: Dict[bytes, bytes] = {}
        for key, value in db_rows:
            if key in overlay:
                continue
            if self._cleared and self._in_cleared(key):
                continue
            merged[key] = value
        covered: Callable[[bytes], bool]
        if db_rows and not final:
            edge = db_rows[-1][0]
            covered = (lambda k: k >= edge) if reverse else (lambda k: k <= edge)
        else:
            covered = lambda k: True  # noqa: E731
        db_values = dict(db_rows)
        for key, value in overlay.items():
            if not (low <= key < high) or not covered(key):
                continue
            if value is ...:
                value = apply_adds(db_values.get(key), self._adds[key])
            if value is not None:
                merged[key] = value
        ordered = sorted(merged.items(), reverse=reverse)
        return rows + [KeyValue(k, v) for k, v in ordered]

    def _fold_adds(self, rows: List[KeyValue]) -> None:
        """Keys with pending adds that a conflicting range read returned become sets."""
        if not self._adds:
            return
        for key, value in rows:
            if key in self._adds:
                del self._adds[key]
                self._sets[key] = value
