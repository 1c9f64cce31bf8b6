"""supervision.waker.Waker: a wake from another thread after the actor closed
its waker writes nothing, not even to a descriptor that reuses the number."""

from __future__ import annotations

import os
import threading

from supervision.waker import Waker


class FakeActor:
    """What a Waker uses of its actor: watch_fd and unwatch_fd."""

    def __init__(self) -> None:
        self.watched: dict = {}

    def watch_fd(self, fd: int, callback) -> None:
        self.watched[fd] = callback

    def unwatch_fd(self, fd: int) -> None:
        self.watched.pop(fd, None)


def test_wakes_coalesce_into_one_callback_run() -> None:
    actor, calls = FakeActor(), []
    waker = Waker(actor, lambda: calls.append(1))
    threads = [threading.Thread(target=waker.wake) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (on_readable,) = actor.watched.values()
    on_readable()
    assert calls == [1]
    waker.close()
    assert actor.watched == {}


def test_a_wake_after_close_writes_to_no_descriptor() -> None:
    waker = Waker(FakeActor(), lambda: None)
    waker.close()
    r, w = os.pipe()  # the lowest free numbers: most likely the closed pipe's
    try:
        os.set_blocking(r, False)
        waker.wake()
        waker.close()  # a second close is harmless
        try:
            got = os.read(r, 10)
        except BlockingIOError:
            got = b""
        assert got == b""
    finally:
        os.close(r)
        os.close(w)
