"""Fuzzing the configuration files: cluster.properties (master_service.config) and
worker.properties (worker_service.config).

Property: a file is either accepted, or every problem is reported as a message naming
the key (or the file) — never an exception other than ConfigError, never a crash of
``txcluster check-config`` (exit 0 or 1 with messages, no traceback). The files start
from a valid one and are damaged key by key: values replaced by junk, keys dropped,
unknown and duplicated keys, numbered keys with bad numbers, peers without a URL, control
queries and client auth files with random content, invalid UTF-8.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from master_service.config import MasterConfig, check_config
from tests.fuzz.settings import fuzz_settings, record
from tests.fuzz.strategies import sparql_queries
from txinfra.properties import ConfigError
from worker_service.config import WorkerConfig


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz-config")
    secret = root / "cluster.secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    os.chmod(secret, 0o600)
    return root


def master_base(folder: Path) -> dict[str, str]:
    return {
        "node-id": "master1", "master-url": "http://127.0.0.1:7200", "repository-id": "repo",
        "listen-address": "127.0.0.1:7200", "data-dir": str(folder / "data"),
        "cluster-secret-file": str(folder / "cluster.secret"),
        "worker.1.url": "http://127.0.0.1:7301", "worker.2.url": "http://127.0.0.1:7302",
    }


def worker_base(folder: Path) -> dict[str, str]:
    return {"repository-id": "repo", "data-dir": str(folder / "w"),
            "listen-address": "127.0.0.1:7301",
            "cluster-secret-file": str(folder / "cluster.secret")}


_values = st.one_of(
    st.sampled_from(["", " ", "true", "false", "yes", "0", "-1", "1e400", "nan", "inf",
                     "999999999999999999999", "127.0.0.1:99999", ":7200", "[::1]:7200",
                     "http://", "https://127.0.0.1:7200/", "ftp://x", "NORMAL", "mute",
                     "strict", "Smart", "DEBUG", "/nonexistent/file", "master1", "a b",
                     "\\u0000", "\\", "=", ":", "#", "!", "é", "\\uZZZZ"]),
    st.text(max_size=20),
)
_master_keys = st.sampled_from([
    "node-id", "master-url", "repository-id", "listen-address", "data-dir",
    "cluster-secret-file", "net-speed-bits-per-sec", "full-replication-time-factor",
    "min-time-to-consider-full-replication-s", "log-max-size", "log-max-depth", "read-only",
    "mode", "protect-single-worker", "control-queries", "consistency", "health-interval-s",
    "request-timeout-s", "client-auth-file", "split-recovery", "jmx.port", "jmx.host",
    "log-level", "worker.1.url", "worker.3.url", "worker.0.url", "worker.x.url",
    "worker..url", "peer.1.id", "peer.1.url", "peer.2.id", "tls-cert-file", "tls-key-file",
    "tls-ca-file", "advertised-hosts", "unknown-key", "", "worker.1.url ", "tx-log-max-size",
    "tx-log-max-depth", "replication.compression",
])
_worker_keys = st.sampled_from([
    "repository-id", "data-dir", "listen-address", "cluster-secret-file", "repository-title",
    "verify-on-start", "sync-writes", "log-level", "tls-cert-file", "tls-key-file",
    "tls-ca-file", "advertised-hosts", "unknown", "",
])
_side_files = st.one_of(
    sparql_queries.map(lambda q: ("control-queries", q)),
    st.lists(sparql_queries, min_size=1, max_size=3).map(
        lambda qs: ("control-queries", "\n---\n".join(qs))),
    st.sampled_from(["ASK {}", "ASK { ?s ?p ?o }\n---\nSELECT * {}", "---\n---", "",
                     "ASK { SERVICE <http://127.0.0.1:1/> { ?s ?p ?o } }"]).map(
        lambda t: ("control-queries", t)),
    st.lists(st.one_of(st.sampled_from(["alice:pw:read", "bob:p:w:write", "carol::read",
                                        ":pw:write", "dave:pw:admin", "# comment", "",
                                        "alice:pw2:write", "noseparators"]),
                       st.text(max_size=15)), max_size=4).map(
        lambda lines: ("client-auth-file", "\n".join(lines))),
)


@st.composite
def damaged_files(draw, base: dict[str, str], keys: st.SearchStrategy[str]) -> list:
    """Lines of a properties file: the base with some keys changed, dropped or added,
    plus sometimes a raw line (no separator, continuation, invalid escape)."""
    props = dict(base)
    for _ in range(draw(st.integers(0, 4))):
        how = draw(st.sampled_from(["set", "set", "drop", "duplicate"]))
        key = draw(keys)
        if how == "drop":
            props.pop(key, None)
        elif how == "set":
            props[key] = draw(_values)
    lines = [f"{k}={v}" for k, v in props.items()]
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.one_of(
            st.sampled_from(["key-without-value", "\\", "a\\\n", "  ", "! comment",
                             "=value-without-key", "worker.1.url=http://127.0.0.1:7301",
                             "x=\\u12"]), st.text(max_size=30))))
    return lines


def _write(path: Path, lines: list[str], raw_prefix: bytes) -> None:
    path.write_bytes(raw_prefix + "\n".join(lines).encode("utf-8", "surrogatepass"))


@fuzz_settings(2.0)
@given(data=st.data(), side=st.one_of(st.none(), _side_files),
       raw_prefix=st.sampled_from([b"", b"", b"\xff\xfe", b"\xef\xbb\xbf", b"#\x80\n"]))
def test_cluster_properties(folder, data, side, raw_prefix):
    base = master_base(folder)
    if side is not None:
        key, text = side
        (folder / key).write_text(text, encoding="utf-8", errors="surrogatepass")
        base[key] = str(folder / key)
    lines = data.draw(damaged_files(base, _master_keys))
    path = folder / "cluster.properties"
    _write(path, lines, raw_prefix)
    problems = check_config(path)  # must not raise
    assert all(isinstance(p, str) and p.strip() for p in problems), problems
    try:
        MasterConfig.load(path)
        loaded = True
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}: "), exc
        loaded = False
    # check-config and the real load agree: a file that starts passes the check.
    assert loaded == (not problems), (lines, problems)
    record("config: cluster.properties", 0 if loaded else 1)


@fuzz_settings(2.0)
@given(data=st.data(),
       raw_prefix=st.sampled_from([b"", b"", b"\xff\xfe", b"#\x80\n"]))
def test_worker_properties(folder, data, raw_prefix):
    lines = data.draw(damaged_files(worker_base(folder), _worker_keys))
    path = folder / "worker.properties"
    _write(path, lines, raw_prefix)
    try:
        WorkerConfig.load(path)
        record("config: worker.properties", 0)
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}: ") and len(str(exc)) > len(str(path)) + 2, exc
        record("config: worker.properties", 1)


@fuzz_settings(0.05)
@given(data=st.data())
@pytest.mark.processes
def test_check_config_command(folder, data):
    """The command operators run: exit 0 (OK) or 1 with one message per problem, never a
    traceback. A process per example, so only a few of them."""
    lines = data.draw(damaged_files(master_base(folder), _master_keys))
    path = folder / "cli.properties"
    _write(path, lines, b"")
    out = subprocess.run([sys.executable, "-m", "txcluster.cli", "check-config", str(path)],
                         capture_output=True, text=True, timeout=60)
    record("config: check-config command", out.returncode)
    assert out.returncode in (0, 1), out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    if out.returncode == 1:
        assert out.stderr.strip().startswith(f"{path}: "), out.stderr
