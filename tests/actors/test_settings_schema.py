"""The settings schema (actors.settings.schema): one entry per key, and what is
derived from it: defaults, run-time keys, validation, typed sections."""

from __future__ import annotations

import pytest

from actors.settings import schema as settings
from actors.settings.config import DEFAULTS, RUNTIME_KEYS, Config, ConfigError, CouchJobsChanged, parse_value


def test_defaults_and_runtime_keys_are_read_off_the_schema():
    assert DEFAULTS == settings.defaults() and Config().values == settings.defaults()
    assert RUNTIME_KEYS == {
        "replicator": ("max_jobs", "max_churn", "interval", "max_history", "health_threshold"),
        "couch_jobs": tuple(DEFAULTS["couch_jobs"]),
    }
    assert len({(s.section, s.key) for s in settings.SCHEMA}) == len(settings.SCHEMA), "a key listed twice"


@pytest.mark.parametrize("setting", settings.SCHEMA, ids=lambda s: f"{s.section}.{s.key}")
def test_each_default_parses_to_itself_and_each_bound_holds(setting):
    assert parse_value(setting.section, setting.key, setting.default) == setting.default
    if setting.kind != "int":
        return
    assert parse_value(setting.section, setting.key, str(setting.low)) == setting.low
    with pytest.raises(ConfigError, match=f">= {setting.low}"):
        parse_value(setting.section, setting.key, setting.low - 1)
    with pytest.raises(ConfigError, match="integer"):
        parse_value(setting.section, setting.key, "1.5")
    if setting.high is not None:
        assert parse_value(setting.section, setting.key, setting.high) == setting.high
        with pytest.raises(ConfigError, match=f"<= {setting.high}"):
            parse_value(setting.section, setting.key, setting.high + 1)
    if setting.unit in ("ms", "port"):
        assert setting.high == {"ms": settings.MAX_MSEC, "port": 65535}[setting.unit]


def test_a_section_is_typed_once_in_seconds():
    values = dict(DEFAULTS["couch_jobs"], type_monitor_holdoff_msec=250, type_check_period_msec=1500)
    typed = settings.couch_jobs_settings(values)
    assert typed.type_monitor_holdoff == 0.25 and typed.type_check_period == 1.5
    assert typed.type_monitor_timeout is None, "infinity is no timeout"
    assert typed.activity_monitor_max_jitter == 10.0
    with pytest.raises(AttributeError):
        typed.type_check_period = 2.0  # frozen


def test_every_section_has_a_frozen_record_with_units_converted():
    config = Config()
    config.set("replicator", "interval", "2500")
    config.set("replicator", "handlers", "myapp.jobs, other.mod:run")
    config.set("worker", "grace", "12")
    assert set(settings.RECORDS) == {s.section for s in settings.SCHEMA}
    node, replicator, worker = config.node, config.replicator, config.worker
    assert (node.port, node.http_port, node.bind_address, node.log_level, node.app) == (
        1900,
        5984,
        "127.0.0.1",
        "info",
        "",
    )
    assert replicator.interval == 2.5 and replicator.health_threshold == 120.0  # ms and s: both seconds
    assert replicator.handlers == ("myapp.jobs", "other.mod:run") and replicator.stores == ()
    assert (worker.concurrency, worker.max_attempts, worker.grace, worker.type_timeout) == (4, 3, 12.0, 30.0)
    assert config.couch_jobs == settings.couch_jobs_settings(config.values["couch_jobs"])
    with pytest.raises(AttributeError):
        config.node.port = 1  # frozen: a change goes through Config.set (validated)


def test_a_change_applies_only_over_an_older_generation():
    change = CouchJobsChanged(dict(DEFAULTS["couch_jobs"]), 7)
    assert change.newer_than(6) and not change.newer_than(7) and not change.newer_than(8)
