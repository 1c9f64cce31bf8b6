"""Raw HTTP over sockets for the hostile tests, and what a CouchDB answer must look like."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

#: Seconds an answer may take; more is a hang.
ANSWER_TIMEOUT = 15.0


@dataclass
class Reply:
    """One HTTP answer as read off the socket (``status`` None: closed with no answer)."""

    raw: bytes
    status: int | None = None
    reason: str = ""
    headers: dict = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Reply({self.raw[:300]!r}{'...' if len(self.raw) > 300 else ''})"


def parse(raw: bytes) -> Reply:
    reply = Reply(raw)
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return reply
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return reply
    reply.status = int(parts[1])
    reply.reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        reply.headers[name.decode("latin-1").strip().lower()] = value.decode("latin-1").strip()
    length = reply.headers.get("content-length")
    reply.body = body[: int(length)] if length and length.isdigit() else body
    return reply


def exchange(port: int, data: bytes, *, half_close: bool = False, timeout: float = ANSWER_TIMEOUT) -> Reply:
    """Send ``data`` and read until the server closes the connection (or one full answer is in).

    Raises AssertionError when nothing conclusive comes within ``timeout``.
    """
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed before reading everything: read what it said
        chunks: list[bytes] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no answer within {timeout}s to {data[:200]!r}; got {b''.join(chunks)[:200]!r}")
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except socket.timeout:
                continue
            if not chunk:
                break
            chunks.append(chunk)
            reply = parse(b"".join(chunks))
            length = reply.headers.get("content-length")
            if reply.status is not None and length and length.isdigit() and len(reply.body) >= int(length):
                if reply.headers.get("connection", "").lower() != "close":
                    break  # a whole answer on a kept-alive connection
        return parse(b"".join(chunks))


def request_bytes(method: str, target: str, body: bytes | None = None, headers: dict | None = None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def request(
    port: int,
    method: str,
    target: str,
    body: Any = None,
    headers: dict | None = None,
    content_type: str | None = "application/json",
) -> Reply:
    """One request; a ``body`` that is not bytes is sent as JSON."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    headers = dict(headers or {})
    if data is not None and content_type is not None:
        headers.setdefault("Content-Type", content_type)
    return exchange(port, request_bytes(method, target, data, headers))


def segment(text: str) -> str:
    """One path segment, percent-encoded (``/`` included)."""
    return quote(text, safe="")


def is_couch_error(reply: Reply, method: str = "GET") -> bool:
    """True for a CouchDB-shaped error: JSON ``{"error": str, "reason": str}`` (or the
    ``{"error": "not found"}`` of an unknown ``_scheduler`` path), no traceback."""
    if reply.status is None or not 400 <= reply.status < 500:
        return False
    if not reply.headers.get("content-type", "").startswith("application/json"):
        return False
    if method == "HEAD":
        return reply.body == b""
    try:
        body = json.loads(reply.body)
    except ValueError:
        return False
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return False
    if body == {"error": "not found"}:
        return reply.status == 404
    return isinstance(body.get("reason"), str) and set(body) == {"error", "reason"}


def describe(reply: Reply) -> str:
    return f"{reply.status} {reply.headers.get('content-type')} {reply.body[:300]!r}"
