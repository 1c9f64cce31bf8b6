"""Facts about OS processes, read from /proc."""
from __future__ import annotations


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` is a live (not zombie) process."""
    if not pid:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in (b"Z", b"X")
