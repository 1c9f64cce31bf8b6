"""Hostile logins on a node with an admin: a password UTF-8 cannot encode is a 401.

``POST /_session`` with a JSON body whose password holds a lone surrogate
(``"\\ud800"``, valid JSON) once reached ``password.encode()`` in
actors/auth.py and was answered 500 with a traceback; it is now an ordinary
wrong password (401 ``unauthorized``), for a known name and an unknown one.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from . import strategies as S
from .http import describe, is_couch_error, request
from .test_http_admin import n  # noqa: F401 - the module's node, with an admin

pytestmark = pytest.mark.timeout(120)


@settings(max_examples=10, deadline=None, database=None)
@given(
    name=st.sampled_from(["adm", "nobody"]) | S.odd_text,
    password=S.surrogate_text,
    key=st.sampled_from(["name", "username"]),
)
def test_a_password_utf8_cannot_encode_is_401(n, name, password, key) -> None:  # noqa: F811
    reply = request(n.http_port, "POST", "/_session", json.dumps({key: name, "password": password}).encode())
    assert reply.status == 401 and is_couch_error(reply) and reply.json()["error"] == "unauthorized", describe(reply)
