"""The property every fuzz test checks, and the state it compares."""

from __future__ import annotations

import httpx

from tests.fuzz.settings import record

NOT_SUPPORTED = 501


def assert_clear_answer(prop: str, r: httpx.Response, what: object) -> None:
    """Never a 5xx; a 4xx carries a message that says something.

    501 is the one 5xx allowed: the RDF4J protocol's answer for a feature that is
    deliberately not supported (e.g. a read inside a transaction), with a message saying
    so; the request is then a refusal like a 4xx (it changes nothing)."""
    record(prop, r.status_code)
    assert r.status_code < 500 or (r.status_code == NOT_SUPPORTED and "not supported"
                                   in r.text), f"{r.status_code} for {what!r}: {r.text[:2000]}"
    if r.status_code >= 400:
        assert r.text.strip(), f"{r.status_code} without a message for {what!r}"


def master_head(client: httpx.Client) -> dict:
    """The head of the master's transaction log (seq, fingerprint, quads)."""
    r = client.get("/health")
    r.raise_for_status()
    return r.json()["head"]
