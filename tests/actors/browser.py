"""Headless chromium driven over the DevTools protocol on a pipe, for the status page's browser tests.

No library needed: chromium started with ``--remote-debugging-pipe`` reads
JSON commands, each ended by a NUL byte, on its fd 3 and writes answers and
events the same way on its fd 4. A test opens a page, finds an element by a
CSS selector (the DOM domain: no script runs in the page), clicks it with real
mouse events at its centre and reads the page's HTML after the navigation the
click caused. ``close`` leaves no chromium process behind.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from typing import Any

from tests.procs import group_pids, wait_until

CHROMIUM = "/usr/bin/chromium"


class BrowserError(AssertionError):
    """The browser did not answer, or answered with an error."""


class Browser:
    """One headless chromium with one page (``profile``: a fresh directory for its user data)."""

    def __init__(self, profile: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        commands_r, self._commands = os.pipe()
        self._events, events_w = os.pipe()

        def fds() -> None:  # in the child: its ends of the pipes as fds 3 and 4 (inheritable)
            high_r, high_w = os.dup(commands_r), os.dup(events_w)  # neither is 3 or 4 now that both are taken
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        args = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1200,900",
            f"--user-data-dir={profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        # close_fds=False: the dup2s of fds() run before subprocess would close them; every other fd
        # this process opened is close-on-exec (PEP 446), so chromium inherits nothing else
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=fds,
            close_fds=False,
        )
        os.close(commands_r)
        os.close(events_w)
        self._buffer = b""
        self._next_id = 0
        self._pending: list[dict] = []
        try:
            target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
            self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
                "sessionId"
            ]
            self.send("Page.enable")
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ protocol
    def send(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        """Send a command and wait for its answer (events that come first are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._pending.append(reply)

    def wait_event(self, method: str) -> dict:
        """The next event named ``method`` (kept ones first)."""
        while True:
            for i, event in enumerate(self._pending):
                if event.get("method") == method:
                    return self._pending.pop(i)
            self._pending.append(self._read())

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._events], [], [], left)[0]:
                raise BrowserError(f"chromium said nothing for {self.timeout} s")
            chunk = os.read(self._events, 1 << 16)
            if not chunk:
                raise BrowserError(f"chromium closed its pipe (exit status {self.proc.poll()})")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    # ------------------------------------------------------------ the page
    def open(self, url: str) -> str:
        """Load ``url``; its HTML once loaded."""
        self._pending = [e for e in self._pending if e.get("method") != "Page.loadEventFired"]
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        return self.html()

    def url(self) -> str:
        """The page's address (after any redirect)."""
        history = self.send("Page.getNavigationHistory")
        return history["entries"][history["currentIndex"]]["url"]

    def html(self) -> str:
        root = self.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        return self.send("DOM.getOuterHTML", {"nodeId": root})["outerHTML"]

    def click(self, selector: str) -> str:
        """Click the centre of the first element matching ``selector`` (real mouse events);
        the HTML of the page the click leads to, once loaded."""
        root = self.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = self.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        if not node:
            raise BrowserError(f"nothing matches {selector!r} in {self.html()[:2000]}")
        self.send("DOM.scrollIntoViewIfNeeded", {"nodeId": node})
        quad = self.send("DOM.getBoxModel", {"nodeId": node})["model"]["content"]
        x, y = sum(quad[0::2]) / 4, sum(quad[1::2]) / 4
        self._pending = [e for e in self._pending if e.get("method") != "Page.loadEventFired"]
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
        self.wait_event("Page.loadEventFired")
        return self.html()

    def close(self) -> None:
        for fd in (self._commands, self._events):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        wait_until(lambda: not group_pids(self.proc.pid), 10, "no chromium process left")

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
