"""A node's runtime file: where it lives, who may write it, what it proves.

Principle: nothing a file says is trusted enough to signal a process; only
what the kernel says is. A node is recorded in ``<runtime dir>/node-<port>.json``::

    {"version": 2, "nonce", "boot_id", "port", "die_with_owner",
     "owner", "owner_start",                                   # the process that started it
     "pid", "pid_start", "admin_pid", "admin_start", "pgid"}   # its node supervisor, admin, group

(while the node starts, the file names its starter as ``starter`` and
``starter_start`` and nothing else: a record with an ``owner`` is a node
that is up)

and the file carries an exclusive ``flock`` for the node's whole life: it is
created and locked before the actor system forks, so the admin, its logger
and every actor inherit the locked descriptor (the starter closes its own
copy once the node is up). Hence:

* **Proof of death.** The lock is free exactly when no process of the node
  is left: such a file is removed and nothing is signalled, whatever pids it
  names (:func:`examine`).
* **Proof of identity.** A process holding the file open is the node's
  (:func:`node_processes`, from ``/proc/<pid>/fd``; the file read through
  that descriptor must carry the node's random ``nonce``, so a later file
  that got the same inode number proves nothing); a process of the same
  process group as a holder is too, since a group can only be joined from
  within its session, which the admin created. These, and nothing else, are
  killed (:func:`kill_node_processes`), each through a pidfd checked after
  it was opened.
* Recorded pids count only with their start times (``/proc/<pid>/stat``
  field 22) within the recorded boot (:func:`recorded_alive`).

The runtime directory is private (:func:`runtime_dir`): ``$OTPJOBS_RUNTIME_DIR``,
else ``$XDG_RUNTIME_DIR/otpjobs``, else ``<temp dir>/otpjobs-<uid>``, created
with mode 0700; an existing one must be this user's and writable by no one
else, or :class:`~supervision.exceptions.RuntimeDirError` is raised before
anything is created or signalled. Files in it are created under a temporary
name with ``O_EXCL|O_NOFOLLOW`` and published with ``link`` (which fails if
the name exists), and opened with ``O_NOFOLLOW``: a symlink is never followed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import signal
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .exceptions import RuntimeDirError
from .procs import (
    boot_id,
    file_holders,
    group_members,
    held_file,
    pid_alive,
    proc_stat,
    readable,
    same_process,
    start_time,
)

log = logging.getLogger(__name__)

VERSION = 2
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


# ------------------------------------------------------------ the directory
def runtime_dir() -> Path:
    """The private directory of runtime files, created (mode 0700) if missing.

    Raises:
        RuntimeDirError: it cannot be created, or it is not a directory of
            this user's that no one else may write (a symlink, in the
            default places); nothing has been created or signalled.
    """
    explicit = os.environ.get("OTPJOBS_RUNTIME_DIR")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if explicit:
        path = Path(explicit)
    elif xdg and os.path.isabs(xdg):
        path = Path(xdg) / "otpjobs"
    else:
        path = Path(tempfile.gettempdir()) / f"otpjobs-{os.getuid()}"
    try:
        if explicit:
            path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise RuntimeDirError(path, f"cannot be created ({exc.strerror})") from None
    check_private(path, follow=bool(explicit))
    return path


def check_private(path: Path, follow: bool = False) -> None:
    """Raise RuntimeDirError unless ``path`` is a directory owned by this user
    and not writable by group or others (``follow``: a symlink to one will do)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        raise RuntimeDirError(path, f"cannot be read ({exc.strerror})") from None
    fix = "; remove it or set OTPJOBS_RUNTIME_DIR to a private directory"
    if stat.S_ISLNK(st.st_mode):
        raise RuntimeDirError(path, f"is a symbolic link (to {os.readlink(path)}){fix}")
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeDirError(path, f"is not a directory{fix}")
    if st.st_uid != os.geteuid():
        raise RuntimeDirError(path, f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}){fix}")
    if st.st_mode & 0o022:
        raise RuntimeDirError(
            path,
            f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"chmod 700 it, or set OTPJOBS_RUNTIME_DIR to a private directory",
        )


def runtime_file(port: int) -> Path:
    """The runtime file of the node on admin ``port``."""
    return runtime_dir() / f"node-{port}.json"


def open_private(path: str | Path) -> int:
    """An ``O_RDWR`` descriptor of the regular file ``path`` of this user's,
    created empty (mode 0600, ``O_EXCL``) if missing; no symlink is followed.

    Raises:
        RuntimeDirError: ``path`` is not a regular file of this user's.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        try:
            fd = os.open(path, flags | os.O_NONBLOCK)
        except FileNotFoundError:
            continue  # removed meanwhile: create it
        except OSError as exc:
            raise RuntimeDirError(
                Path(path).parent, f"holds {Path(path).name}, which cannot be used ({exc.strerror}: a symlink?)"
            ) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise RuntimeDirError(
                Path(path).parent, f"holds {Path(path).name}, which is not a regular file of this user's"
            )
        os.set_blocking(fd, True)
        return fd
    raise RuntimeDirError(Path(path).parent, f"keeps replacing {Path(path).name}")


# ------------------------------------------------------------ a node's file
def owner_record(die_with_owner: bool) -> dict[str, Any]:
    """The record of a node this process starts, as its owner (see :func:`claim`)."""
    pid = os.getpid()
    return {
        "version": VERSION,
        "nonce": secrets.token_hex(8),
        "boot_id": boot_id(),
        "owner": pid,
        "owner_start": start_time(pid),
        "die_with_owner": die_with_owner,
    }


def claim(port: int, record: dict[str, Any]) -> int:
    """Create the runtime file of ``port``, locked, holding ``record``.

    The file names this process as the starter (``starter``,
    ``starter_start``) until the full record is written.

    Returns:
        Its descriptor: keep it open while the node's processes fork (they
        inherit the lock), write the full record with :func:`write`, close it.

    Raises:
        FileExistsError: the port already has a runtime file.
    """
    directory = runtime_dir()
    temporary = directory / f".node-{port}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: no one else has it
        starting = {k: v for k, v in record.items() if k not in ("owner", "owner_start")}
        write(fd, dict(starting, port=port, starter=record.get("owner"), starter_start=record.get("owner_start")))
        os.link(temporary, directory / f"node-{port}.json")  # EEXIST if the name exists, even as a symlink
    except BaseException:
        os.close(fd)
        raise
    finally:
        temporary.unlink(missing_ok=True)
    return fd


def write(fd: int, record: dict[str, Any]) -> None:
    """Replace the record in a runtime file held open by this process."""
    data = json.dumps(record, sort_keys=True).encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))


@dataclass(frozen=True)
class Entry:
    """What a port's runtime file says, and what the kernel says about it."""

    port: int
    path: Path
    regular: bool  # False: a symlink or anything but a regular file of this user's
    record: dict[str, Any] | None  # what it says (None: unreadable)
    held: bool  # its lock is held: some process of the node is alive
    dev: int = 0
    ino: int = 0

    @property
    def info(self) -> dict[str, Any] | None:
        """The record, if it is of this version (older ones carry no lock and no start times)."""
        return self.record if self.record is not None and self.record.get("version") == VERSION else None

    @property
    def up(self) -> bool:
        """True once the node recorded its processes (it has started)."""
        return self.info is not None and "pid" in self.info


def examine(port: int) -> Entry | None:
    """The runtime file of ``port`` (None if there is none); nothing is changed."""
    path = runtime_file(port)
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError:  # ELOOP: a symlink
        return Entry(port, path, False, None, False)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return Entry(port, path, False, None, False)
        held = _lock_held(fd)
        record = _parse(fd)
        for _ in range(20):  # a record being rewritten: read again
            if record is not None or not held:
                break
            time.sleep(0.005)
            record = _parse(fd)
        return Entry(port, path, True, record, held, st.st_dev, st.st_ino)
    finally:
        os.close(fd)


def read_runtime(port: int) -> dict[str, Any] | None:
    """The record of the node on ``port`` (None if none, or unreadable)."""
    entry = examine(port)
    return entry.info if entry is not None else None


def _lock_held(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _parse(fd: int) -> dict[str, Any] | None:
    try:
        record = json.loads(os.pread(fd, 65536, 0))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


_RECORDED = {
    "pid": ("pid", "pid_start"),
    "admin": ("admin_pid", "admin_start"),
    "owner": ("owner", "owner_start"),
    "starter": ("starter", "starter_start"),
}


def recorded_alive(info: dict[str, Any] | None, who: str) -> bool:
    """True if the process recorded as ``who`` (``pid``: the node supervisor,
    ``admin``, ``owner`` or, while it starts, ``starter``) is alive and is
    that process (same boot, same start time)."""
    if not info or info.get("boot_id") != boot_id():
        return False
    pid_key, start_key = _RECORDED[who]
    return same_process(info.get(pid_key), info.get(start_key))


def remove(entry: Entry) -> bool:
    """Remove ``entry``'s file if it is still that file and no process holds
    its lock (anything but a regular file is unlinked as it is, never
    followed). Returns True if it was removed."""
    if not entry.regular:
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise RuntimeDirError(
                entry.path.parent, f"holds {entry.path.name}, which cannot be removed ({exc.strerror})"
            ) from None
        return True
    try:
        fd = os.open(entry.path, _READ_FLAGS)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (entry.dev, entry.ino) or _lock_held(fd) or not _same_record(fd, entry):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no start can take it while it is unlinked
        entry.path.unlink()
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _same_record(fd: int, entry: Entry) -> bool:
    """True if the file open as ``fd`` is ``entry``'s node's (same nonce; a
    record without one, from an older version, is taken as it is)."""
    nonce = (entry.record or {}).get("nonce")
    if nonce is None:
        return True
    for _ in range(20):
        record = _parse(fd)
        if record is not None:
            return bool(record.get("nonce") == nonce)
        time.sleep(0.005)  # being rewritten
    return False


# ------------------------------------------------------------ its processes
def _holds(pid: int, entry: Entry) -> bool:
    """True if ``pid`` holds ``entry``'s file open, that very node's file."""
    path = held_file(pid, entry.dev, entry.ino)
    if path is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # the held file itself, deleted or not
    except OSError:
        return False
    try:
        return _same_record(fd, entry)
    finally:
        os.close(fd)


def node_processes(entry: Entry, spare: Iterable[int] = ()) -> set[int]:
    """The live processes holding ``entry``'s file: the node's (``spare`` and
    this process aside)."""
    if not entry.regular:
        return set()
    holders = file_holders(entry.dev, entry.ino) - {os.getpid(), *spare}
    return {pid for pid in holders if _holds(pid, entry)}


def kill_node_processes(entry: Entry, spare: Iterable[int] = (), timeout: float = 10.0) -> set[int]:
    """SIGKILL every process proven to be the node's, until none is left.

    Proven: it holds the runtime file open, or it is in the process group
    of such a holder while that holder is alive (checked after a pidfd of
    each was opened, so a number handed to another process meanwhile is
    never signalled). ``spare`` (and this process, and its own process
    group) are left alone.

    Returns:
        The pids signalled.
    """
    spare = {os.getpid(), *spare}
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        holders = node_processes(entry, spare)
        if not holders or time.monotonic() > deadline:
            return killed
        pidfds = _proven(entry, holders, spare)
        for pid, fd in pidfds.items():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                killed.add(pid)
            os.close(fd)
        _wait_gone(holders, deadline)


def _proven(entry: Entry, holders: set[int], spare: set[int]) -> dict[int, int]:
    """pidfds of the holders still holding the file, and of the other members
    of their process groups while one of those holders is alive."""
    proven: dict[int, int] = {}
    groups: dict[int, list[int]] = {}
    for pid in holders:
        fd = _pidfd(pid)
        if fd is None:
            continue
        st = proc_stat(pid)
        if st is None or not _holds(pid, entry):
            os.close(fd)
            continue
        proven[pid] = fd
        groups.setdefault(st.pgid, []).append(fd)
    mine = os.getpgid(0)
    for pgid, holder_fds in groups.items():
        if pgid == mine:
            continue
        members: dict[int, int] = {}
        for pid in group_members(pgid) - spare - set(proven):
            fd = _pidfd(pid)
            st = proc_stat(pid) if fd is not None else None
            if fd is not None and st is not None and st.pgid == pgid:
                members[pid] = fd
            elif fd is not None:
                os.close(fd)
        if any(not readable([fd], 0) for fd in holder_fds):  # a holder outlived the census
            proven.update(members)
        else:
            for fd in members.values():
                os.close(fd)
    return proven


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _wait_gone(pids: set[int], deadline: float) -> None:
    end = min(deadline, time.monotonic() + 2.0)
    while any(pid_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.01)


def strangers(record: dict[str, Any] | None) -> bool:
    """True if a pid or process group a (dead node's) record names is in use
    now: by other processes, since the node's are gone."""
    record = record or {}
    ids = [record.get(k) for k in ("pid", "admin_pid", "owner", "starter")]
    if any(isinstance(pid, int) and pid > 0 and pid_alive(pid) for pid in ids):
        return True
    pgid = record.get("pgid")
    return isinstance(pgid, int) and pgid > 1 and bool(group_members(pgid))


def describe(record: dict[str, Any] | None) -> str:
    """The recorded ids, for a log line."""
    record = record or {}
    keys = ("pgid", "pid", "admin_pid", "owner") if "owner" in record or "starter" not in record else ("starter",)
    return " ".join(f"{k}={record.get(k)}" for k in keys)
