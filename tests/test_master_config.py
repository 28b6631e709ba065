"""cluster.properties: keys, defaults, refusals, and persistence of runtime changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from master_service.config import (
    ClientUser,
    MasterConfig,
    check_config,
    key_for_attribute,
    update_properties,
)
from txinfra.properties import ConfigError

REQUIRED = {
    "node-id": "m1",
    "master-url": "http://m1.example:8080",
    "repository-id": "repo",
    "listen-address": "0.0.0.0:8080",
    "data-dir": "/var/lib/txcluster",
    "cluster-secret-file": "/etc/txcluster/cluster.secret",
}


def write(tmp_path: Path, extra: dict[str, str] | None = None, drop: tuple[str, ...] = (),
          name: str = "cluster.properties") -> Path:
    values = {k: v for k, v in {**REQUIRED, **(extra or {})}.items() if k not in drop}
    path = tmp_path / name
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()), encoding="utf-8")
    return path


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        MasterConfig.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")  # every error names the file
    return message


# ---- keys and defaults ----

def test_required_keys_only_gives_the_documented_defaults(tmp_path):
    config = MasterConfig.load(write(tmp_path))
    assert config.node_id == "m1"
    assert config.master_url == "http://m1.example:8080"
    assert config.repository_id == "repo"
    assert (config.host, config.port) == ("0.0.0.0", 8080)
    assert config.data_dir == Path("/var/lib/txcluster")
    assert config.cluster_secret_file == Path("/etc/txcluster/cluster.secret")
    assert config.workers == ()  # zero workers is a valid start
    assert config.peers == ()
    # docs/design/smart-replication.md#the-decision (parameters)
    assert config.net_speed_bits_per_sec == 104_857_600
    assert config.full_replication_time_factor == 1.3
    assert config.min_time_to_consider_full_replication_s == 600
    assert config.replication_compression is True  # smart-replication.md#full-replication
    # docs/design/cluster-basics.md#the-logs-limits:
    # LogMaxSize 100,000 transactions, LogMaxDepth 7 days (in hours)
    assert config.log_max_size == 100_000
    assert config.log_max_depth_hours == 168
    assert config.read_only is False
    assert config.mode == "NORMAL"
    assert config.protect_single_worker is True
    assert config.control_queries_file is None and config.control_queries == ()
    assert config.consistency == "read-your-writes"
    assert config.health_interval_s == 1.0
    assert config.request_timeout_s == 30.0
    assert config.client_auth_file is None and config.client_users == ()
    assert config.split_recovery == "None"
    assert config.jmx_port is None
    assert config.jmx_host == "127.0.0.1"
    assert config.log_level == "INFO"
    assert config.advertised_hosts == ()


def test_every_key_is_parsed(tmp_path):
    queries = tmp_path / "control.rq"
    queries.write_text("ASK { ?s ?p ?o }\n---\nASK { ?s a ?c }\n")
    auth = tmp_path / "clients"
    auth.write_text("# clients\nalice:s3cr:et:write\n\nbob:pw:read\n")
    config = MasterConfig.load(write(tmp_path, {
        "worker.2.url": "http://w2:7200/",
        "worker.10.url": "http://w10:7200",
        "worker.1.url": "https://w1:7200",
        "peer.1.id": "m2",
        "peer.1.url": "http://m2.example:8080",
        "peer.2.id": "m3",
        "peer.2.url": "http://m3.example:8080",
        "net-speed-bits-per-sec": "1000000000",
        "full-replication-time-factor": "2.5",
        "min-time-to-consider-full-replication-s": "0",
        "log-max-size": "10",
        "log-max-depth": "24",
        "read-only": "true",
        "mode": "mute",
        "protect-single-worker": "false",
        "control-queries": str(queries),
        "consistency": "STRICT",
        "health-interval-s": "0.25",
        "request-timeout-s": "5",
        "client-auth-file": str(auth),
        "split-recovery": "smart",
        "jmx.port": "9999",
        "jmx.host": "0.0.0.0",
        "log-level": "debug",
        "advertised-hosts": "m1.example, [2001:db8::1]:8443",
    }))
    assert config.advertised_hosts == ("m1.example", "[2001:db8::1]:8443")
    assert config.workers == ("https://w1:7200", "http://w2:7200", "http://w10:7200")
    assert config.peers == (("m2", "http://m2.example:8080"), ("m3", "http://m3.example:8080"))
    assert config.net_speed_bits_per_sec == 1_000_000_000
    assert config.full_replication_time_factor == 2.5
    assert config.min_time_to_consider_full_replication_s == 0
    assert (config.log_max_size, config.log_max_depth_hours) == (10, 24)
    assert config.read_only is True
    assert config.mode == "MUTE"  # case-insensitive, canonical spelling
    assert config.protect_single_worker is False
    assert config.control_queries_file == queries
    assert config.control_queries == ("ASK { ?s ?p ?o }", "ASK { ?s a ?c }")
    assert config.consistency == "strict"
    assert (config.health_interval_s, config.request_timeout_s) == (0.25, 5.0)
    assert config.client_auth_file == auth
    assert config.client_users == (ClientUser("alice", "s3cr:et", "write"),
                                   ClientUser("bob", "pw", "read"))
    assert "s3cr" not in repr(config)  # passwords stay out of logs
    assert config.split_recovery == "Smart"
    assert (config.jmx_port, config.jmx_host) == (9999, "0.0.0.0")
    assert config.log_level == "DEBUG"


@pytest.mark.parametrize(("key", "value"), [
    ("node-id", "m 1"),
    ("node-id", "m.1"),
    ("master-url", "ftp://m1"),
    ("repository-id", "-repo"),
    ("listen-address", "8080"),
    ("data-dir", ""),
    ("net-speed-bits-per-sec", "0"),
    ("net-speed-bits-per-sec", "100Mbps"),
    ("full-replication-time-factor", "0"),
    ("full-replication-time-factor", "inf"),
    ("min-time-to-consider-full-replication-s", "-1"),
    ("log-max-size", "0"),
    ("log-max-depth", "1.5"),
    ("read-only", "maybe"),
    ("mode", "LOUD"),
    ("protect-single-worker", "2"),
    ("consistency", "weak"),
    ("health-interval-s", "0"),
    ("request-timeout-s", "-3"),
    ("split-recovery", "Aggressive"),
    ("jmx.port", "70000"),
    ("jmx.host", ""),
    ("log-level", "TRACE"),
    ("worker.1.url", "w1:7200"),
    ("peer.1.url", "not-a-url"),
    ("control-queries", "/nonexistent/control.rq"),
    ("client-auth-file", "/nonexistent/clients"),
    ("advertised-hosts", "http://m1.example"),
    ("advertised-hosts", "m1.example:http"),
    ("advertised-hosts", " , "),
])
def test_an_invalid_value_is_refused_naming_its_key(tmp_path, key, value):
    extra = {key: value}
    if key.startswith("peer."):
        extra["peer.1.id"] = "m2"
    message = refused(write(tmp_path, extra))
    assert f"invalid value for '{key}'" in message


def test_every_bad_key_is_named_in_one_error(tmp_path):
    message = refused(write(tmp_path, {
        "log-max-size": "lots", "mode": "quiet", "colour": "blue",
        "worker.1.url": "http://w1", "worker.2.url": "http://w1",
    }, drop=("node-id",)))
    for part in ("'log-max-size'", "'mode'", "unknown key 'colour'",
                 "missing required key 'node-id'", "'worker.2.url'"):
        assert part in message


@pytest.mark.parametrize("key", sorted(REQUIRED))
def test_a_missing_required_key_is_named(tmp_path, key):
    assert f"missing required key '{key}'" in refused(write(tmp_path, drop=(key,)))


def test_an_unknown_key_is_refused(tmp_path):
    assert "unknown key 'tx-log-max-count'" in refused(
        write(tmp_path, {"tx-log-max-count": "5"}))


# The log limits under the names of the original's documentation
# (docs/design/cluster-basics.md#the-logs-limits).
def test_the_documented_log_limit_names_are_aliases(tmp_path):
    path = write(tmp_path, {"tx-log-max-size": "5", "tx-log-max-depth": "24"})
    config = MasterConfig.load(path)
    assert (config.log_max_size, config.log_max_depth_hours) == (5, 24)
    assert check_config(path) == []
    # both spellings with the same value: fine
    both = write(tmp_path, {"tx-log-max-size": "5", "log-max-size": "5"}, name="b.properties")
    assert MasterConfig.load(both).log_max_size == 5


def test_two_spellings_with_different_values_are_refused(tmp_path):
    path = write(tmp_path, {"log-max-size": "10", "tx-log-max-size": "5"})
    message = ("'log-max-size' and 'tx-log-max-size' are two spellings of the same setting "
               "with different values ('10' and '5'): keep one of them")
    assert message in refused(path)
    assert check_config(path) == [message]
    assert "invalid value for 'tx-log-max-depth'" in refused(
        write(tmp_path, {"tx-log-max-depth": "1.5"}, name="d.properties"))


def test_a_runtime_change_keeps_the_files_spelling(tmp_path):
    path = write(tmp_path, {"tx-log-max-size": "5"})
    config = update_properties(path, {"log-max-size": "7"})
    assert config.log_max_size == 7 and MasterConfig.load(path) == config
    lines = path.read_text().splitlines()
    assert "tx-log-max-size=7" in lines and not any(k.startswith("log-max") for k in lines)
    both = write(tmp_path, {"tx-log-max-depth": "5", "log-max-depth": "5"}, name="b.properties")
    assert update_properties(both, {"log-max-depth": "9"}).log_max_depth_hours == 9
    lines = both.read_text().splitlines()
    assert "tx-log-max-depth=9" in lines and "log-max-depth=9" in lines


def test_a_key_set_twice_is_refused(tmp_path):
    path = write(tmp_path, {"worker.1.url": "http://w1"})
    path.write_text(path.read_text() + "worker.1.url=http://w2\n")
    assert "key 'worker.1.url' is set more than once" in refused(path)


# ---- workers and peers ----

@pytest.mark.parametrize("second", ["http://w1:7200", "http://w1:7200/", "http://W1:7200"])
def test_a_duplicate_worker_url_is_refused_naming_both_keys(tmp_path, second):
    message = refused(write(tmp_path, {"worker.1.url": "http://w1:7200",
                                       "worker.3.url": second}))
    assert "duplicate worker URL" in message
    assert "'worker.1.url' and 'worker.3.url'" in message


@pytest.mark.parametrize("key", ["worker.0.url", "worker.x.url", "worker.01.url"])
def test_a_worker_number_must_be_an_integer_from_one(tmp_path, key):
    assert f"'{key}'" in refused(write(tmp_path, {key: "http://w1"}))


def test_a_duplicate_peer_id_is_refused(tmp_path):
    message = refused(write(tmp_path, {
        "peer.1.id": "m2", "peer.1.url": "http://m2", "peer.2.id": "m2", "peer.2.url": "http://x",
    }))
    assert "duplicate peer id 'm2' in 'peer.1.id' and 'peer.2.id'" in message


def test_a_peer_cannot_be_this_master(tmp_path):
    message = refused(write(tmp_path, {
        "peer.1.id": "m1", "peer.1.url": "http://m2",
        "peer.2.id": "m3", "peer.2.url": "http://m1.example:8080/",
    }))
    assert "'peer.1.id' is this master's own node-id 'm1'" in message
    assert "'peer.2.url' is this master's own master-url" in message


def test_a_peer_needs_both_id_and_url(tmp_path):
    message = refused(write(tmp_path, {"peer.1.id": "m2", "peer.2.url": "http://m3"}))
    assert "'peer.1.id' has no matching 'peer.1.url'" in message
    assert "'peer.2.url' has no matching 'peer.2.id'" in message


def test_sync_seed_from_must_name_a_peer(tmp_path):
    message = refused(write(tmp_path, {"peer.1.id": "m2", "peer.1.url": "http://m2",
                                       "sync-seed-from": "m3"}))
    assert "'sync-seed-from' is 'm3', which no peer.<n>.id names" in message
    ok = write(tmp_path, {"peer.1.id": "m2", "peer.1.url": "http://m2",
                          "sync-seed-from": "m2"}, name="ok.properties")
    assert MasterConfig.load(ok).sync_seed_from == "m2"


# ---- control queries (docs/design/write-path.md#the-probe-worker-and-control-queries) ----

def control(tmp_path: Path, text: str) -> str:
    queries = tmp_path / "control.rq"
    queries.write_text(text)
    message = refused(write(tmp_path, {"control-queries": str(queries)}))
    assert "invalid value for 'control-queries'" in message
    assert str(queries) in message  # names the file
    return message


def test_a_select_control_query_is_refused_by_number(tmp_path):
    message = control(tmp_path, "ASK { ?s ?p ?o }\n---\n\nSELECT * { ?s ?p ?o }\n")
    assert "query 2 (line 4) is a SELECT query, not an ASK query" in message
    assert "query 1" not in message


def test_a_construct_control_query_is_refused(tmp_path):
    message = control(tmp_path, "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }")
    assert "query 1 (line 1) is a CONSTRUCT or DESCRIBE query" in message


def test_a_malformed_control_query_is_refused_by_number(tmp_path):
    message = control(tmp_path, "ASK {?s ?p ?o}\n---\nASK {?s ?p ?o}\n  ---  \nASK { ?s ?p }\n")
    assert "query 3 (line 5) does not parse" in message


def test_a_control_query_may_not_call_a_service(tmp_path):
    message = control(tmp_path, "ASK { SERVICE <http://10.0.0.1/sparql> { ?s ?p ?o } }")
    assert "query 1 (line 1) uses SERVICE" in message


def test_service_inside_iris_strings_and_comments_is_not_the_keyword(tmp_path):
    queries = tmp_path / "control.rq"
    queries.write_text('# SERVICE check\nASK { <http://x/SERVICE> ?p "SERVICE" }\n---\n')
    config = MasterConfig.load(write(tmp_path, {"control-queries": str(queries)}))
    assert config.control_queries == ('# SERVICE check\nASK { <http://x/SERVICE> ?p "SERVICE" }',)


def test_an_empty_control_queries_file_is_refused(tmp_path):
    assert "holds no query" in control(tmp_path, "\n---\n\n")


def test_a_bad_client_auth_line_is_refused_by_line(tmp_path):
    auth = tmp_path / "clients"
    auth.write_text("alice:pw:write\nbob:pw:admin\ncarol\nalice:x:read\n")
    message = refused(write(tmp_path, {"client-auth-file": str(auth)}))
    assert "invalid value for 'client-auth-file'" in message
    assert "line 2: role expected one of read, write, got 'admin'" in message
    assert "line 3: expected user:password:role" in message
    assert "line 4: user 'alice' is listed twice" in message


# ---- persistence of runtime changes ----

ORIGINAL = """\
# cluster.properties of m1
node-id = m1
master-url=http://m1.example:8080
repository-id=repo

! where it listens
listen-address=0.0.0.0:8080
data-dir=/var/lib/txcluster
cluster-secret-file=/etc/txcluster/cluster.secret
# the workers
worker.1.url=http://w1:7200
log-max-size = 100
mode=NORMAL
"""


@pytest.fixture
def props(tmp_path) -> Path:
    path = tmp_path / "cluster.properties"
    path.write_text(ORIGINAL)
    path.chmod(0o640)
    return path


def test_update_replaces_in_place_appends_and_removes_keeping_comments(props):
    config = update_properties(props, {
        "log-max-size": "5000", "worker.2.url": "http://w2:7200", "mode": None,
        "split-recovery": "Simple",
    })
    # the changed key in place (the rest of the file byte for byte), new keys appended,
    # the removed one gone
    assert props.read_text() == ORIGINAL.replace("log-max-size = 100\nmode=NORMAL\n", (
        "log-max-size=5000\n"
        "worker.2.url=http\\://w2\\:7200\n"
        "split-recovery=Simple\n"))
    assert config.log_max_size == 5000
    assert config.workers == ("http://w1:7200", "http://w2:7200")
    assert config.mode == "NORMAL"  # removed: back to its default
    assert config.split_recovery == "Simple"
    assert MasterConfig.load(props) == config
    assert props.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in props.parent.iterdir()) == ["cluster.properties"]


def test_values_are_escaped_and_read_back(props):
    update_properties(props, {"jmx.host": "host name#1=x"})
    assert MasterConfig.load(props).jmx_host == "host name#1=x"


@pytest.mark.parametrize(("changes", "named"), [
    ({"log-max-size": "0"}, "'log-max-size'"),
    ({"log-max-size": "10", "mode": "LOUD"}, "'mode'"),
    ({"colour": "blue"}, "unknown key 'colour'"),
    ({"node-id": None}, "missing required key 'node-id'"),
    ({"worker.5.url": "http://w1:7200/"}, "'worker.1.url' and 'worker.5.url'"),
    ({"peer.1.id": "m1", "peer.1.url": "http://m9"}, "'peer.1.id'"),
])
def test_a_refused_update_leaves_the_file_byte_identical(props, changes, named):
    before = props.read_bytes()
    with pytest.raises(ConfigError) as info:
        update_properties(props, changes)
    assert named in str(info.value)
    assert props.read_bytes() == before
    assert sorted(p.name for p in props.parent.iterdir()) == ["cluster.properties"]


def test_worker_and_peer_changes_name_their_keys(props):
    config = MasterConfig.load(props)
    config = update_properties(props, config.add_worker_changes("http://w2:7200"))
    config = update_properties(props, config.add_worker_changes("http://w3:7200"))
    config = update_properties(props, config.remove_worker_changes("http://w2:7200/"))
    assert config.workers == ("http://w1:7200", "http://w3:7200")
    assert "worker.3.url" in props.read_text() and "worker.2.url" not in props.read_text()
    config = update_properties(props, config.add_peer_changes("m2", "http://m2:8080"))
    assert config.peers == (("m2", "http://m2:8080"),)
    config = update_properties(props, config.remove_peer_changes("m2"))
    assert config.peers == () and "peer." not in props.read_text()
    with pytest.raises(ConfigError, match="no worker"):
        config.remove_worker_changes("http://w9:7200")


def test_update_of_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        update_properties(tmp_path / "nope.properties", {"mode": "MUTE"})
    assert not os.listdir(tmp_path)


# ---- check-config and attribute names ----

def test_check_config_lists_problems(tmp_path):
    assert check_config(write(tmp_path)) == []
    problems = check_config(write(tmp_path, {"mode": "x", "worker.1.url": "nope"}))
    assert len(problems) == 2
    assert problems[0].startswith("invalid value for 'mode'")
    assert problems[1].startswith("invalid value for 'worker.1.url'")
    assert check_config(tmp_path / "missing.properties") == ["configuration file not found"]


@pytest.mark.parametrize(("attribute", "key"), [
    ("NodeID", "node-id"),
    ("MasterURL", "master-url"),
    ("NetSpeedBitsPerSec", "net-speed-bits-per-sec"),
    ("FullReplicationTimeFactor", "full-replication-time-factor"),
    ("MinTimeToConsiderFullReplicationS", "min-time-to-consider-full-replication-s"),
    ("ReadOnly", "read-only"),
    ("Mode", "mode"),
    ("ProtectSingleWorker", "protect-single-worker"),
    ("LogMaxSize", "log-max-size"),
    ("LogMaxDepth", "log-max-depth"),
    ("SplitRecovery", "split-recovery"),
])
def test_documented_attributes_map_to_their_keys(attribute, key):
    assert key_for_attribute(attribute) == key


def test_an_undocumented_attribute_has_no_key():
    with pytest.raises(KeyError):
        key_for_attribute("NumberOfTriples")
