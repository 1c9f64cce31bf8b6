"""The config file is shared with people and their editors: a run-time
change rewrites only its own line, and a reader never sees the file half
written (the keeper writes a new file and renames it over the old one)."""

from __future__ import annotations

import threading

from actors.settings.config import load, write_value

TEXT = "# my node\n[node]\nport = 1900\n\n[replicator]\n; tuned by hand\nmax_jobs = 500\nmax_churn = 20\n"


def test_a_change_rewrites_its_line_only(tmp_path):
    path = tmp_path / "node.ini"
    path.write_text(TEXT)
    write_value(path, "replicator", "max_jobs", "7")
    assert path.read_text() == TEXT.replace("max_jobs = 500", "max_jobs = 7")


def test_a_reader_never_sees_a_half_written_file(tmp_path):
    path = tmp_path / "node.ini"
    path.write_text(TEXT + "".join(f"; padding line {n} " + "x" * 200 + "\n" for n in range(200)))
    seen: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(str(load(path).get("replicator", "max_jobs")))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(1, 60):
            write_value(path, "replicator", "max_jobs", str(n))
    finally:
        stop.set()
        thread.join(10)
    assert seen and all(value.isdigit() for value in seen), "every read parsed a whole file"
    assert str(load(path).get("replicator", "max_jobs")) == "59"
