"""The node's HTTP side: ``server`` (the supervised listener actor),
``main`` (the HTTP process), ``api`` (the WSGI app), ``auth``,
``monitoring`` (CouchDB-shaped views) and ``status_page``.
"""
