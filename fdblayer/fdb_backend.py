"""The FoundationDB backend (placeholder until the full wrapper lands)."""

from __future__ import annotations

from typing import Optional

from fdblayer.exceptions import StoreUnavailable


class FdbDatabase:
    """Placeholder: see the next commit."""

    @classmethod
    def open(cls, cluster_file: Optional[str], prefix: str) -> "FdbDatabase":
        raise StoreUnavailable("FoundationDB backend not implemented yet")
