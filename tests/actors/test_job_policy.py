"""The job policy (:mod:`actors.settings.policy`) and its two config keys, as pure code.

Grouped by concept: what the config accepts, which handlers are allowed,
which SQLite files (real paths: ``..`` and symlinks cannot escape), which
other store URLs (prefixes, at a boundary), and how the policy travels to
the HTTP process. The same rules on a real node over HTTP are in
``tests/hostile/test_http_job_policy.py``.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from actors.settings.config import Config, ConfigError, load, parse_runtime_value, parse_value
from actors.settings.policy import Forbidden, JobPolicy, data_directory
from actors.names import REPLICATE_HANDLER


def node_policy(data: Path, handlers: str = "", stores: str = "") -> JobPolicy:
    config = Config()
    config.set("node", "store", f"sqlite:///{data}/store.db")
    config.set("replicator", "handlers", handlers)
    config.set("replicator", "stores", stores)
    return JobPolicy.from_config(config)


def refused(policy: JobPolicy, spec: dict) -> Forbidden:
    with pytest.raises(Forbidden) as info:
        policy.check(spec)
    return info.value


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    directory.mkdir()
    return directory


# ------------------------------------------------------------------ config


def test_both_keys_default_to_empty() -> None:
    assert Config().get("replicator", "handlers") == "" and Config().get("replicator", "stores") == ""


@pytest.mark.parametrize(
    "raw, value",
    [
        ("", ""),
        (" , ", ""),
        ("myapp.jobs", "myapp.jobs"),
        (" myapp.jobs ,myapp.other:run ", "myapp.jobs, myapp.other:run"),
        ("a:b.c", "a:b.c"),
        ("_m.x1:Klass.method", "_m.x1:Klass.method"),
    ],
)
def test_handlers_entries_are_modules_or_callables(raw, value) -> None:
    assert parse_value("replicator", "handlers", raw) == value


@pytest.mark.parametrize(
    "raw, entry",
    [
        ("myapp.jobs, not a handler!", "not a handler!"),
        ("myapp.:run", "myapp.:run"),
        (":run", ":run"),
        ("myapp:", "myapp:"),
        ("myapp:run:again", "myapp:run:again"),
        ("my-app.jobs", "my-app.jobs"),
        ("os:getcwd, ../evil", "../evil"),
        ("1mod", "1mod"),
    ],
)
def test_a_malformed_handlers_entry_is_a_config_error_naming_it(raw, entry) -> None:
    with pytest.raises(ConfigError) as info:
        parse_value("replicator", "handlers", raw)
    error = info.value
    assert (error.section, error.key, error.value) == ("replicator", "handlers", raw)
    assert str(error) == (
        f"[replicator] handlers = {raw!r}: entry {entry!r} is not 'package.module' or 'package.module:callable'"
    )


@pytest.mark.parametrize(
    "raw, why",
    [
        ("sqlite:///var/lib/otpjobs", "give the directory holding SQLite stores, not a sqlite: URL"),
        ("SQLite:////data", "give the directory holding SQLite stores, not a sqlite: URL"),
        ("/data, 1x://host/", "is not a URL prefix (scheme://...) or a directory"),
        ("://host/", "is not a URL prefix (scheme://...) or a directory"),
    ],
)
def test_a_malformed_stores_entry_is_a_config_error(raw, why) -> None:
    with pytest.raises(ConfigError, match="^\\[replicator\\] stores = ") as info:
        parse_value("replicator", "stores", raw)
    assert why in str(info.value)


@pytest.mark.parametrize("raw", [1, None, ["a"], True])
def test_list_keys_must_be_strings(raw) -> None:
    with pytest.raises(ConfigError, match="must be a string"):
        parse_value("replicator", "handlers", raw)


def test_the_keys_are_read_from_the_file(tmp_path) -> None:
    ini = tmp_path / "node.ini"
    ini.write_text("[replicator]\nhandlers = myapp.jobs,myapp.other:run\nstores = /srv/data, fdb://\n")
    config = load(ini)
    assert config.get("replicator", "handlers") == "myapp.jobs, myapp.other:run"
    assert config.get("replicator", "stores") == "/srv/data, fdb://"


def test_a_bad_entry_in_the_file_fails_the_load(tmp_path) -> None:
    ini = tmp_path / "node.ini"
    ini.write_text("[replicator]\nhandlers = myapp.jobs, rm -rf\n")
    with pytest.raises(ConfigError, match="entry 'rm -rf' is not"):
        load(ini)


@pytest.mark.parametrize("key", ["handlers", "stores"])
def test_the_keys_cannot_change_at_run_time(key) -> None:
    with pytest.raises(ConfigError, match="can only be changed in the config file"):
        parse_runtime_value("replicator", key, "os")


# ---------------------------------------------------------------- handlers


def test_by_default_only_the_built_in_handler_and_no_handler_are_allowed(data) -> None:
    policy = node_policy(data)
    policy.check({"handler": REPLICATE_HANDLER})
    policy.check({"handler": None, "source": f"sqlite:///{data}/a.db", "target": f"sqlite:///{data}/b.db"})
    policy.check({})
    for handler in (
        "os:getcwd",
        "tests.actors.scheduler_fixtures:idle",
        "actors.scheduler.replicate:key_range",
        "actors.scheduler.replicate:replicate.__globals__",
    ):
        error = refused(policy, {"handler": handler})
        assert (error.field, error.value) == ("handler", handler)
        assert str(error) == f"handler {handler!r} is not allowed: not in the node's [replicator] handlers"


def test_a_module_entry_allows_every_attribute_of_that_module_only(data) -> None:
    policy = node_policy(data, handlers="myapp.jobs")
    for handler in ("myapp.jobs:run", "myapp.jobs:Klass.method", "myapp.jobs:other"):
        policy.check({"handler": handler})
    for handler in ("myapp.jobsx:run", "myapp.jobs.sub:run", "myapp:run", "myapp.job:run", "Myapp.jobs:run"):
        assert refused(policy, {"handler": handler}).field == "handler"


def test_a_callable_entry_allows_exactly_that_callable(data) -> None:
    policy = node_policy(data, handlers="myapp.other:run, myapp.jobs")
    policy.check({"handler": "myapp.other:run"})
    policy.check({"handler": "myapp.jobs:anything"})
    for handler in ("myapp.other:run2", "myapp.other:run.__call__", "myapp.other:Run", "myapp.other:other"):
        assert refused(policy, {"handler": handler}).value == handler


def test_values_that_are_not_names_are_left_to_the_spec_validation(data) -> None:
    policy = node_policy(data)
    for value in (None, "", 1, ["os:getcwd"], {"x": 1}):
        policy.check({"handler": value, "source": value, "target": value})


# ------------------------------------------------------------ SQLite files


def test_the_default_stores_are_the_directory_of_the_node_store(data, tmp_path) -> None:
    policy = node_policy(data)
    assert policy.directories == (os.path.realpath(data),) and policy.urls == ()
    for url in (
        f"sqlite:///{data}/x.db",
        f"sqlite:///{data}/sub/dir/x.db",
        f"sqlite:///{data}/x.db?mode=ro",
        f"sqlite:///{data}/./x.db",
        f"sqlite:///{tmp_path}/other/../data/x.db",
        f"sqlite://localhost/{data}/x.db",
        f"SQLITE:///{data}/x.db",
        f"sqlite:{data}/x.db",
    ):
        policy.check({"source": url, "target": {"url": url}})


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////etc/passwd.db",
        "sqlite:///{tmp}/elsewhere/x.db",
        "sqlite:///{data}/../elsewhere/x.db",
        "sqlite:///{data}/sub/../../x.db",
        "sqlite:///{data}/%2E%2E/x.db",
        "sqlite:///{data}x/y.db",
        "sqlite:///{data}",
        "sqlite:///{data}/",
        "sqlite://otherhost/{data}/x.db",
        "sqlite:///{data}/x.db?mode=rx",
    ],
)
def test_a_sqlite_file_outside_the_directories_is_refused(data, tmp_path, url) -> None:
    url = url.format(tmp=tmp_path, data=data)
    policy = node_policy(data)
    error = refused(policy, {"source": f"sqlite:///{data}/ok.db", "target": url})
    assert (error.field, error.value) == ("target", url)
    assert refused(policy, {"source": {"url": url}}).field == "source"


def test_a_symlinked_directory_cannot_escape(data, tmp_path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (data / "link").symlink_to(tmp_path / "elsewhere")
    error = refused(node_policy(data), {"target": f"sqlite:///{data}/link/x.db"})
    assert str(tmp_path / "elsewhere" / "x.db") in str(error) and "outside the node's [replicator] stores" in str(error)


def test_a_symlinked_file_cannot_escape_even_dangling(data, tmp_path) -> None:
    (data / "victim.db").symlink_to(tmp_path / "victim.db")  # not there yet: SQLite would create it
    refused(node_policy(data), {"target": f"sqlite:///{data}/victim.db"})


def test_relative_urls_and_directories_are_taken_from_the_working_directory(data, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    policy = node_policy(data, stores="data, extra")
    assert policy.directories == (os.path.realpath(data), os.path.realpath(tmp_path / "extra"))
    policy.check({"target": "sqlite:///data/x.db"})
    policy.check({"target": "sqlite:extra/x.db"})
    refused(policy, {"target": "sqlite:///x.db"})
    monkeypatch.chdir(data)
    policy = JobPolicy.from_entries(node_store="sqlite:///otpjobs.db")  # the [node] store default
    assert policy.directories == (os.path.realpath(data),)


def test_configured_directories_replace_the_data_directory(data, tmp_path) -> None:
    policy = node_policy(data, stores=f"{tmp_path}/extra")
    policy.check({"target": f"sqlite:///{tmp_path}/extra/x.db"})
    refused(policy, {"target": f"sqlite:///{data}/x.db"})


# ------------------------------------------------------------- other URLs


def test_other_urls_are_refused_by_default(data) -> None:
    policy = node_policy(data)
    for url in (
        "fdb://",
        "fdb:///etc/foundationdb/fdb.cluster",
        "http://adm:secret@example.invalid/db",
        "postgresql://db/x",
        "x.db",
        "/abs/x.db",
    ):
        assert refused(policy, {"source": url}).why == "not a store under the node's [replicator] stores"


def test_url_prefixes_match_at_a_boundary_only(data) -> None:
    policy = node_policy(data, stores="postgresql://db.example.com, fdb:///etc/foundationdb/, https://h/db?")
    for url in (
        "postgresql://db.example.com",
        "postgresql://db.example.com/jobs",
        "postgresql://db.example.com?x=1",
        "fdb:///etc/foundationdb/fdb.cluster",
        "fdb:///etc/foundationdb/fdb.cluster?prefix=x",
        "https://h/db",
        "https://h/db?a=b",
    ):
        policy.check({"target": url})
    for url in (
        "postgresql://db.example.com.evil.org/",
        "postgresql://db.example.comx",
        "fdb:///etc/foundationdb",
        "fdb:///etc/foundationdb/../../tmp/x.cluster",
        "fdb:///etc/foundationdb/%2e%2e/x.cluster",
        "fdb:///etc/foundationdb/a/..",
        "https://h/dbx",
        "POSTGRESQL://db.example.com/jobs",
        f"sqlite:///{data}/x.db",
    ):  # a sqlite: URL is checked by its file only
        refused(policy, {"target": url})


def test_a_node_on_foundationdb_allows_its_own_cluster_by_default() -> None:
    policy = JobPolicy.from_entries(node_store="fdb://")
    assert policy.urls == ("fdb://?",) and policy.directories == ()
    policy.check({"source": "fdb://", "target": "fdb://?prefix=copy"})
    for url in ("fdb:///etc/x.cluster", "fdb://x", "sqlite:////tmp/x.db", "fdb://", "fdb://?"):
        refused(policy, {"target": url})
    assert data_directory("fdb:///etc/fdb.cluster?prefix=a") == "fdb:///etc/fdb.cluster?"
    assert data_directory("nope://") is None


def test_no_node_store_allows_no_store() -> None:
    policy = JobPolicy.from_entries()
    refused(policy, {"target": "sqlite:////tmp/x.db"})
    refused(policy, {"target": "fdb://"})


# ---------------------------------------------------------------- travel


def test_the_policy_round_trips_through_json_data(data) -> None:
    policy = node_policy(data, handlers="a.b, c.d:e", stores=f"{data}, fdb://")
    assert JobPolicy.from_dict(policy.to_dict()) == policy


def test_forbidden_pickles_with_its_fields() -> None:
    error = pickle.loads(pickle.dumps(Forbidden("target", "sqlite:////x.db", "outside")))
    assert isinstance(error, ValueError)
    assert (error.field, error.value, error.why) == ("target", "sqlite:////x.db", "outside")
    assert str(error) == "target 'sqlite:////x.db' is not allowed: outside"
