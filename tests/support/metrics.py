"""Scraping a broker's ``/metrics`` in tests, parsed by prometheus-client's own parser."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Scrape:
    """One scrape: every sample by its name (``dmq_requests_total``, ``..._bucket``) and the
    family names with their types."""

    text: str
    samples: dict[str, list[tuple[dict[str, str], float]]]
    families: dict[str, str]

    def values(self, name: str, **labels: str) -> list[float]:
        """The values of ``name``'s samples whose labels include ``labels``."""
        return [v for lbl, v in self.samples.get(name, [])
                if all(lbl.get(k) == want for k, want in labels.items())]

    def value(self, name: str, default: float | None = None, **labels: str) -> float:
        """The one sample of ``name`` with ``labels``; ``default`` when there is none."""
        found = self.values(name, **labels)
        if not found:
            if default is not None:
                return default
            raise AssertionError(f"no sample {name}{labels} in the scrape")
        assert len(found) == 1, f"{len(found)} samples {name}{labels}: {found}"
        return found[0]

    def total(self, name: str, **labels: str) -> float:
        return sum(self.values(name, **labels))

    def labelled(self, name: str, **labels: str) -> list[dict[str, str]]:
        return [lbl for lbl, _ in self.samples.get(name, [])
                if all(lbl.get(k) == want for k, want in labels.items())]


def parse(text: str) -> Scrape:
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    families: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for s in family.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return Scrape(text, samples, families)


def get(url: str, timeout: float = 15.0) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET, error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def scrape(url: str) -> Scrape:
    status, headers, body = get(url)
    assert status == 200, (status, body[:500])
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
    return parse(body.decode())


DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "dmq.json"
METRIC_NAME = re.compile(r"\b((?:dmq|process|python)_[a-z0-9_]+)\b")


def dashboard_queries() -> list[str]:
    """Every PromQL query of the Grafana dashboard: panel targets and variable queries."""
    queries: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    queries.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(DASHBOARD.read_text()))
    return queries


def dashboard_metric_names() -> set[str]:
    """The metric (sample) names the dashboard's queries use."""
    return {name for q in dashboard_queries() for name in METRIC_NAME.findall(q)}
