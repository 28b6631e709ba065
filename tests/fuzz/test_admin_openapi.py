"""Schemathesis against the master admin API's own OpenAPI document (/openapi.json).

Every operation the document declares is called with generated parameters and bodies,
valid and invalid per the schema, on a real master with its own cluster (these calls may
add unreachable workers, set read-only, start backups: this cluster is used by nothing
else). Property: never a 5xx; a 4xx says what was wrong; the master never logs a
traceback.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.fuzz.settings import fuzz_settings, record


@pytest.fixture(scope="module")
def admin(module_cluster_factory):
    cluster = module_cluster_factory(2, name="fuzz-admin")
    return cluster, schemathesis.openapi.from_url(f"{cluster.master.url}/openapi.json")


def test_admin_operations(admin):
    # One Hypothesis run per operation of the live document (schemathesis's own pytest
    # plugin does not run under pytest 9 yet: it reads a private attribute of pytest).
    _, schema = admin
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8, [f"{o.method} {o.path}" for o in operations]
    for operation in operations:
        fuzz_operation(operation)


def fuzz_operation(operation) -> None:
    prop = f"admin: {operation.method.upper()} {operation.path}"

    @fuzz_settings(0.3)
    # Positive cases follow the schema (they reach the handlers' own checks); negative
    # ones break it (they reach the framework's validation).
    @given(case=st.one_of(operation.as_strategy(),
                          operation.as_strategy(generation_mode=GenerationMode.NEGATIVE)))
    def call(case):
        response = case.call(timeout=120)
        record(prop, response.status_code)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} {case.query} {case.body!r}: "
            f"{response.status_code} {response.text[:1000]}")
        if response.status_code >= 400:
            assert response.text.strip()

    call()


def test_master_logged_no_traceback(admin):
    master = admin[0].master
    assert master.alive()
    assert "Traceback" not in master.log_tail(500_000)
