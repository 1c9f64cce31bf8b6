"""The pytest plugin of ``supervision.testing`` (registered as ``pytest11``).

Installing the package is enough: a user's tests get the ``otp_node``
fixture without any conftest.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import pytest

from .testing import NodeHandle, running_node


@pytest.fixture
def otp_node() -> Iterator[Callable[..., NodeHandle]]:
    """A factory: ``otp_node(specs, flags=None)`` starts a test node (see
    ``running_node``) and returns its handle; every node it started is
    stopped after the test, which fails if any of their processes leaked."""
    with contextlib.ExitStack() as stack:

        def start(specs: list[Any], flags: Any = None, **kwargs: Any) -> NodeHandle:
            return stack.enter_context(running_node(specs, flags, **kwargs))

        yield start
