"""Permanent jobs (documents): the public API is :mod:`actors.docs.client`,
re-exported here; the node's doc processor is :mod:`actors.docs.processor`.
"""

from actors.docs.client import *  # noqa: F401,F403
from actors.docs.client import __all__  # noqa: F401
