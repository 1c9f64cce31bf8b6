"""Server admins and sessions, as CouchDB does them.

Principle: a password is never kept in clear. Admins come from the config
file's ``[admins]`` section (``name = password``); a clear password found
there is hashed on load and the file is rewritten with the hash in its
place (only those lines change; comments and other sections stay), as
CouchDB does. If the file cannot be rewritten, the hash is kept in memory
only and a warning is logged. Hashes have CouchDB's form
``-pbkdf2-<derived key hex>,<salt hex>,<iterations>`` (PBKDF2-HMAC-SHA1,
20-byte key).

* :func:`hash_password`, :func:`verify_password`;
* :func:`load_admins` (reads, hashes, rewrites);
* :class:`Auth`: Basic credentials and ``AuthSession`` cookies
  (``base64url(name:timestamp_hex:hmac)``, HMAC-SHA256 keyed by the node's
  secret and the admin's stored hash, so a password change ends sessions),
  expiring after ``timeout`` seconds (CouchDB's 600 by default);
* CSRF tokens for the status page's forms (:meth:`Auth.csrf_token`,
  :meth:`Auth.check_csrf`): ``stamp_hex.base64url(hmac)``, the HMAC keyed by
  the node's secret over the admin's name, stored hash and the stamp, so a
  token is bound to the credentials that asked for the page (any admin's, by
  session or Basic; the empty name with no admin), unforgeable without the
  secret, ended by a password change, and valid for :data:`CSRF_TTL` seconds.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import time
from pathlib import Path

from actors.settings.config import replace_file

log = logging.getLogger(__name__)

PBKDF2_PREFIX = "-pbkdf2-"
#: PBKDF2 rounds for new hashes (CouchDB 3.3's default is 10; a verify
#: costs a few ms at this count, and sessions avoid paying it per request).
ITERATIONS = 10000
SESSION_TIMEOUT = 600
COOKIE_NAME = "AuthSession"
#: Seconds a form's CSRF token stays valid (a job page left open longer is reloaded first).
CSRF_TTL = 8 * 3600

_SECTION = re.compile(r"^\s*\[([^\]]+)\]\s*$")
_ENTRY = re.compile(r"^(\s*)([^=:;#\s][^=:]*?)(\s*[=:]\s*)(.*?)(\s*)$")


def _utf8(password: str) -> bytes:
    """The bytes hashed for ``password``; a lone surrogate (no password of the
    config file can hold one) gives bytes no real password has, so it never
    matches, and costs the same hash as any other attempt."""
    return password.encode("utf-8", "surrogatepass")


def hash_password(password: str, salt: str | None = None, iterations: int = ITERATIONS) -> str:
    """A CouchDB ``-pbkdf2-`` hash of ``password``."""
    salt = salt or binascii.hexlify(os.urandom(16)).decode()
    derived = hashlib.pbkdf2_hmac("sha1", _utf8(password), salt.encode(), iterations, 20)
    return f"{PBKDF2_PREFIX}{derived.hex()},{salt},{iterations}"


def is_hashed(value: str) -> bool:
    return value.startswith(PBKDF2_PREFIX)


def verify_password(stored: str, password: str) -> bool:
    """True if ``password`` matches the ``-pbkdf2-`` hash ``stored``."""
    try:
        derived, salt, count = stored[len(PBKDF2_PREFIX) :].split(",")
        iterations = int(count)
    except ValueError:
        return False
    if not is_hashed(stored) or iterations < 1:
        return False
    candidate = hashlib.pbkdf2_hmac("sha1", _utf8(password), salt.encode(), iterations, len(derived) // 2)
    return hmac.compare_digest(candidate.hex(), derived.lower())


def load_admins(path: str | Path | None, rewrite: bool = True) -> dict[str, str]:
    """Admins (name -> hash) from the ``[admins]`` section of ``path``.

    Clear passwords are hashed; with ``rewrite`` the file is rewritten
    (atomically, same mode) with the hashes in their place.
    """
    if path is None:
        return {}
    path = Path(path)
    lines = path.read_text().splitlines(keepends=True)
    admins: dict[str, str] = {}
    section = None
    changed = False
    for i, line in enumerate(lines):
        m = _SECTION.match(line)
        if m:
            section = m.group(1).strip()
            continue
        if section != "admins" or not line.strip() or line.lstrip()[:1] in ("#", ";"):
            continue
        m = _ENTRY.match(line.rstrip("\r\n"))
        if not m:
            continue
        name, value = m.group(2).strip(), m.group(4)
        if not value:
            continue
        if not is_hashed(value):
            value = hash_password(value)
            ending = line[len(line.rstrip("\r\n")) :] or "\n"
            lines[i] = f"{m.group(1)}{m.group(2)}{m.group(3)}{value}{ending}"
            changed = True
        admins[name] = value
    if changed and rewrite:
        try:
            replace_file(path, "".join(lines))
            log.info("admin_passwords_hashed file=%s", path)
        except OSError as exc:
            log.warning("admin_passwords_rewrite_failed file=%s error=%s (hashed in memory only)", path, exc)
    return admins


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Auth:
    """Who is an admin, and whether a request's credentials say so.

    With no admin configured every request is an admin's (CouchDB's
    "admin party"); the node then serves loopback only.
    """

    def __init__(self, admins: dict[str, str], secret: bytes, timeout: int = SESSION_TIMEOUT, clock=time.time) -> None:
        self.admins = dict(admins)
        self.secret = secret
        self.timeout = timeout
        self.clock = clock

    @property
    def enabled(self) -> bool:
        return bool(self.admins)

    def check_password(self, name: str, password: str) -> bool:
        if not isinstance(name, str) or not isinstance(password, str):
            name, password = "", ""  # a JSON number or list: no admin, same cost
        stored = self.admins.get(name)
        if stored is None:
            hash_password(password, iterations=ITERATIONS)  # same cost for unknown names
            return False
        return verify_password(stored, password)

    def basic(self, header: str) -> str | None:
        """The admin named by an ``Authorization: Basic`` header, or None."""
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return name if sep and self.check_password(name, password) else None

    def make_cookie(self, name: str, now: float | None = None) -> str:
        """A session token for ``name``."""
        stamp = format(int(self.clock() if now is None else now), "X")
        return _b64(f"{name}:{stamp}:".encode() + self._mac(name, stamp))

    def session_user(self, token: str) -> tuple[str, int] | None:
        """``(name, issued)`` of a valid, unexpired token, else None."""
        try:
            raw = _unb64(token)
            name_raw, stamp_raw, mac = raw.split(b":", 2)
            name, stamp = name_raw.decode(), stamp_raw.decode()
            issued = int(stamp, 16)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        if name not in self.admins or not hmac.compare_digest(mac, self._mac(name, stamp)):
            return None
        if self.clock() >= issued + self.timeout:
            return None
        return name, issued

    def _mac(self, name: str, stamp: str) -> bytes:
        key = self.secret + self.admins.get(name, "").encode()
        return hmac.new(key, f"{name}:{stamp}".encode(), hashlib.sha256).digest()

    def csrf_token(self, name: str | None, now: float | None = None) -> str:
        """A token the status page's forms carry for ``name`` (None: no admin configured)."""
        stamp = format(int(self.clock() if now is None else now), "x")
        return f"{stamp}.{_b64(self._csrf_mac(name or '', stamp))}"

    def check_csrf(self, token: str | None, name: str | None) -> bool:
        """True when ``token`` came from :meth:`csrf_token` for ``name`` within :data:`CSRF_TTL` seconds."""
        if not isinstance(token, str) or len(token) > 100:
            return False
        stamp, sep, mac = token.partition(".")
        try:
            issued = int(stamp, 16)
        except ValueError:
            return False
        # compared as text: one token per stamp (base64 has other spellings of the same bytes)
        if (
            not sep
            or stamp != format(issued, "x")
            or not hmac.compare_digest(mac.encode(), _b64(self._csrf_mac(name or "", stamp)).encode())
        ):
            return False
        return issued - 60 <= self.clock() < issued + CSRF_TTL

    def _csrf_mac(self, name: str, stamp: str) -> bytes:
        message = b"\0".join([b"csrf", _utf8(name), self.admins.get(name, "").encode(), stamp.encode()])
        return hmac.new(self.secret, message, hashlib.sha256).digest()

    def set_cookie_header(self, token: str) -> str:
        return f"{COOKIE_NAME}={token}; Version=1; Path=/; HttpOnly"

    @staticmethod
    def clear_cookie_header() -> str:
        return f"{COOKIE_NAME}=; Version=1; Expires=Thu, 01-Jan-1970 00:00:00 GMT; Max-Age=0; Path=/; HttpOnly"
