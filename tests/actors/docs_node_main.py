"""``python -m tests.actors.docs_node_main node start ...``: the real CLI, with the
doc processor in the root tree when ``actors.node.root.root_children`` does not
list it yet (so the fail-over tests run the product's own node start)."""

from __future__ import annotations

import sys

from actors import cli
from actors.node import root as node
from actors.docs.processor import doc_children

_root_children = node.root_children


def root_children(config):
    specs = _root_children(config)
    if not any(spec.id == "doc_processor" for spec in specs):
        specs = specs + doc_children(config)
    return specs


if __name__ == "__main__":
    node.root_children = root_children
    sys.exit(cli.main(sys.argv[1:]))
