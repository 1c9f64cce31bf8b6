"""What the HTTP app reads and answers: a request, an error answer, and
the two bodies that are not JSON.

:class:`Request` wraps a WSGI environ: the path split into percent-decoded
segments, the query, headers and cookies, and a body read at most
:data:`MAX_BODY` bytes and parsed as JSON no deeper than
:data:`MAX_JSON_DEPTH`. :class:`HttpError` is any answer other than
success, with CouchDB's ``{"error", "reason"}`` body.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, unquote

from actors.errors import ActorsError

__all__ = [
    "split_db",
    "refuse_cross_site",
    "FORM_TYPES",
    "HttpError",
    "not_allowed",
    "Text",
    "Html",
    "FormHtml",
    "Request",
    "json_depth",
    "MAX_BODY",
    "MAX_JSON_DEPTH",
]

#: Largest request body the app reads (CouchDB's is max_http_request_size).
MAX_BODY = 1 << 20
#: Deepest JSON body (containers inside containers) a request may send: the
#: store's limit for documents and job data (``fdblayer.jobs.codec.MAX_DEPTH``),
#: well below what pickling a job spec to the scheduler can take.
MAX_JSON_DEPTH = 256


class HttpError(ActorsError):
    """An answer other than success: status, CouchDB error and reason."""

    def __init__(self, status: int, error: str, reason: str | None = "", headers: list | None = None) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status, self.error, self.reason, self.headers = status, error, reason, headers or []

    def body(self) -> dict:
        return {"error": self.error} if self.reason is None else {"error": self.error, "reason": self.reason}


def not_allowed(methods: str) -> HttpError:
    return HttpError(405, "method_not_allowed", f"Only {methods} allowed", [("Allow", methods)])


class Text(str):
    """A plain-text answer (Prometheus exposition format)."""


class Html(str):
    """An HTML answer (the status page), sent with a policy that allows no script."""


class FormHtml(Html):
    """An HTML answer whose forms post to its own origin (a job's page): the same policy, but for that."""


class Request:
    """What a handler needs from the WSGI environ."""

    def __init__(self, environ: dict) -> None:
        self.environ = environ
        self.method = environ["REQUEST_METHOD"].upper()
        raw = (
            environ.get("RAW_URI")
            or environ.get("REQUEST_URI")
            or (environ.get("PATH_INFO", "/") + ("?" + environ["QUERY_STRING"] if environ.get("QUERY_STRING") else ""))
        )
        if "://" in raw.split("?", 1)[0]:  # absolute-form request target
            raw = "/" + raw.split("://", 1)[1].partition("/")[2]
        path, _, query = raw.partition("?")
        self.path = path
        self.segments = [unquote(s) for s in path.split("/") if s]
        self.query = parse_qs(query, keep_blank_values=True)
        self.user: str | None = None
        self.new_cookie: str | None = None
        #: Extra response headers a handler sets (Location...).
        self.response_headers: list[tuple[str, str]] = []

    def header(self, name: str) -> str:
        return self.environ.get("HTTP_" + name.upper().replace("-", "_"), "")

    def cookie(self, name: str) -> str | None:
        for part in self.header("Cookie").split(";"):
            key, sep, value = part.strip().partition("=")
            if sep and key == name:
                return value.strip('"')
        return None

    def body(self) -> bytes:
        try:
            length = int(self.environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise HttpError(400, "bad_request", "Invalid Content-Length") from None
        if length > MAX_BODY:
            raise HttpError(413, "too_large", "the request entity is too large")
        data = self.environ["wsgi.input"].read(length) if length > 0 else b""
        return data

    def json(self) -> Any:
        """The body as JSON (``null`` when empty).

        Raises:
            HttpError: 400 ``bad_request`` for a body that is not UTF-8, or not JSON
                (the reason says where)
                or that nests deeper than :data:`MAX_JSON_DEPTH`.
        """
        too_deep = HttpError(400, "bad_request", f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            value = json.loads((self.body() or b"null").decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise HttpError(400, "bad_request", f"the body is not UTF-8: {exc.reason} at byte {exc.start}") from None
        except json.JSONDecodeError as exc:
            raise HttpError(
                400, "bad_request", f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except ValueError:  # what json rejects beyond its grammar (e.g. a number of too many digits)
            raise HttpError(400, "bad_request", "the body is not JSON the server can read") from None
        except RecursionError:  # deeper than the parser goes
            raise too_deep from None
        if json_depth(value) > MAX_JSON_DEPTH:
            raise too_deep
        return value

    @property
    def content_type(self) -> str:
        return self.environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()


def json_depth(value: Any) -> int:
    """How many containers deep a parsed JSON value nests (0 for a scalar), without recursing."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in item)
    return deepest


#: The bodies an HTML form can send without a script: a page of another site can
#: make a browser post them anywhere, so the JSON API takes none of them.
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data", "text/plain")


def refuse_cross_site(req: Request, form_ok: bool) -> None:
    """Refuse a request that changes something (not GET or HEAD) when a page
    of another site may have made it: 403 when the browser says so
    (``Sec-Fetch-Site`` cross-site or same-site), 415 for a form's body
    outside ``_session`` and the status page's forms (``form_ok``), whose
    own checks apply. Clients that are not browsers send neither."""
    site = req.header("Sec-Fetch-Site").strip().lower()
    if site not in ("", "same-origin", "none"):
        raise HttpError(403, "forbidden", f"a request from another site ({site[:40]}) may not change anything")
    if not form_ok and req.content_type in FORM_TYPES:
        raise HttpError(415, "bad_content_type", "Content-Type must be application/json")


def split_db(seg: list[str]) -> tuple[str | None, list[str]]:
    """``(db name, rest)`` of the segments after ``docs``: the db is up to
    the first segment ending in ``_replicator`` (``other/_replicator`` may
    come unescaped), else the first segment."""
    if not seg:
        return None, []
    for i, part in enumerate(seg):
        if part == "_replicator" or part.endswith("/_replicator"):
            return "/".join(seg[: i + 1]), seg[i + 1 :]
    return seg[0], seg[1:]
