"""A watch armed the way a store's callers arm one (shared by the watch tests)."""

from __future__ import annotations

import fdblayer
from fdblayer.watches import Watch


def arm(db, key: bytes) -> Watch:
    """A watch on ``key``, made in the transaction that read it."""

    @fdblayer.transactional
    def armed(tr):
        tr.get(key)
        return tr.watch(key)

    return armed(db)
