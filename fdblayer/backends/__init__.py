"""The store's backends, one module per part, behind ``fdblayer.interface``.

- SQLite, the embedded default: :mod:`.sqlite_backend` (the handle),
  :mod:`.sqlite_transaction`, :mod:`.sqlite_locking` (the writer lock and
  its fair queue, :mod:`.fairlock`), :mod:`.sqlite_sql` (statements, errors);
- PostgreSQL, shared by many machines: :mod:`.postgres_backend`,
  :mod:`.postgres_transaction`, :mod:`.postgres_own_writes` (reads that see
  the transaction's writes), :mod:`.postgres_sql`, and
  :mod:`.postgres_server` (a throwaway server for tests and benchmarks);
- FoundationDB, the distributed engine: :mod:`.fdb_backend` (the official
  bindings);
- what two of them share: :mod:`.pooling` (a handle's idle connections)
  and :mod:`.buffered` (a buffered transaction's versionstamp and watches).

``fdblayer.open`` picks one from the store URL; nothing above this package
names a backend.
"""
