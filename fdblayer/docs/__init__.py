"""The document model: permanent jobs as documents (CouchDB's replicator
documents) in the store, beside the jobs model (:mod:`fdblayer.jobs`) it
builds on.

- ``model``: a document's row, its checks, and put, get, delete and list
  (each adding or removing the document's queue job in the same
  transaction);
- ``leases``: the nodes' hold on documents: accept, renew and release of
  the documents' queue jobs.

This package re-exports ``model``'s public names; it knows nothing of
actors (the node's doc processor, ``actors.docs.processor``, builds on it).
"""

from fdblayer.docs.model import *  # noqa: F403 - the package is the model's public names
from fdblayer.docs.model import __all__ as __all__
