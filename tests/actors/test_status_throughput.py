"""The status page's charts without a node: the readings kept (:class:`actors.http.throughput.Sampler`)
and the SVG drawn from them (``status_page.charts_section``)."""

from __future__ import annotations

import re

from actors.http import status_page
from actors.http.throughput import Sampler


class Counters:
    """A store's counters that a test moves: ``{type: [succeeded, failed]}``; ``down``: reads fail."""

    def __init__(self) -> None:
        self.values: dict = {}
        self.down = False

    def read(self) -> dict:
        if self.down:
            raise ConnectionError("the store is away")
        return {t: tuple(v) for t, v in self.values.items()}


def test_each_reading_adds_one_difference_up_to_sixty_per_type() -> None:
    store = Counters()
    store.values["mail"] = [0, 0]
    sampler = Sampler(store.read, interval=60)
    assert sampler.snapshot() == {"interval": 60, "points": 60, "samples": 0, "series": {}}
    sampler.sample(now=0)
    assert sampler.snapshot()["series"] == {"mail": []}  # one reading: no difference yet
    for minute in range(1, 70):
        store.values["mail"][0] += minute % 3
        store.values["mail"][1] += 1 if minute % 10 == 0 else 0
        sampler.sample(now=minute * 60)
        series = sampler.snapshot()["series"]["mail"]
        assert len(series) == min(minute, 60)
    assert series[-1] == (69 * 60, 69 % 3, 0) and series[0] == (10 * 60, 10 % 3, 1)
    assert sum(s for _, s, _ in series) == sum(m % 3 for m in range(10, 70))
    assert sampler.snapshot()["samples"] == 70


def test_types_are_bounded_a_gone_type_dropped_a_reset_counts_zero_a_failed_read_skipped() -> None:
    store = Counters()
    store.values = {f"t{i:03}": [i, 0] for i in range(5)}
    sampler = Sampler(store.read, interval=1, max_types=3)
    sampler.sample(now=0)
    assert list(sampler.snapshot()["series"]) == ["t000", "t001", "t002"]
    del store.values["t001"]
    store.values["t000"] = [0, 7]  # counters lower than before: a store replaced
    store.values["t002"][0] += 4
    store.down = True
    assert sampler.sample(now=1) is False and sampler.snapshot()["samples"] == 1  # skipped: the store is away
    store.down = False
    assert sampler.sample(now=2) is True
    assert sampler.snapshot()["series"] == {"t000": [(2, 0, 7)], "t002": [(2, 4, 0)], "t003": []}


def test_the_chart_draws_one_point_per_difference_the_newest_at_the_right() -> None:
    store = Counters()
    store.values = {"mail": [0, 0], "<b>x</b>": [0, 0]}
    sampler = Sampler(store.read, interval=60)
    for minute in range(6):
        store.values["mail"][0] += 2 * minute
        store.values["mail"][1] += 1
        sampler.sample(now=minute * 60)
    html = status_page.charts_section(sampler.snapshot(), now=360)
    assert "<h2>Jobs finished per minute, last 1 h</h2>" in html and "<b>" not in html
    assert "<figcaption><code>&lt;b&gt;x&lt;/b&gt;</code>" in html
    mail = re.search(r'<figure class="type-chart"><figcaption><code>mail</code>.*?</figure>', html).group(0)
    assert '<span class="total-succeeded">30</span>' in mail and '<span class="total-failed">5</span>' in mail
    lines = dict(re.findall(r'<polyline class="(\w+)"[^>]* points="([^"]*)"/>', mail))
    points = {css: [tuple(map(float, p.split(","))) for p in line.split()] for css, line in lines.items()}
    right, bottom, top = status_page.CHART_RIGHT, status_page.CHART_BOTTOM, status_page.CHART_TOP
    assert len(points["succeeded"]) == len(points["failed"]) == 5
    assert points["succeeded"][-1] == (right, top)  # 10, the most in one minute, at the top
    assert [y for _, y in points["failed"]] == [bottom - (bottom - top) / 10] * 5
    xs = [x for x, _ in points["succeeded"]]
    assert xs == sorted(xs) and round(xs[1] - xs[0], 1) == round((right - status_page.CHART_LEFT) / 59, 1)
    assert "<script" not in html and "style=" not in html  # attributes only: the page's policy holds
