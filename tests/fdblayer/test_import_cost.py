"""Importing the store layer loads no FoundationDB client library: the
bindings' library search (``ldconfig`` and a trial ``gcc`` link where
libfdb_c is missing, some 30 ms) would otherwise run in every process that
imports it, every command line call and worker host start among them; the
versionstamps of the jobs model still pack. A real subprocess, so that no
other test's imports count."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
tried = []
class Record:
    def find_spec(self, name, path=None, target=None):
        tried.append(name)
        return None
sys.meta_path.insert(0, Record())
import fdblayer
from fdblayer.jobs import api, work
from fdblayer.jobs.keys import DEFAULT_LAYOUT
key = DEFAULT_LAYOUT.activity_key_stamped("t", 7)
assert b"\\xff" * 10 + b"\\x00\\x07" in key, key  # an incomplete versionstamp, user version 7
print("fdb.impl" in tried)
"""


def test_importing_the_store_layer_loads_no_fdb_client_library():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False", out.stderr
