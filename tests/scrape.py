"""One scrape of a node's ``GET /metrics``, parsed with prometheus-client's own parser
(the metrics and direct-lane tests read counters from it).
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str, auth: tuple[str, str] | None = None) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of one scrape."""
    r = httpx.get(f"{url}/metrics", auth=auth, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]
