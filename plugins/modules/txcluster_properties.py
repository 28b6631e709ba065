#!/usr/bin/python
"""Ansible module txcluster.cluster.txcluster_properties: a master's cluster.properties,
merged rather than templated, so that runtime changes survive Ansible.

The master changes cluster.properties itself at runtime (admin API, JMX: mode, read-only,
the replication parameters, workers and peers; master_service/config.py
``update_properties``). Templating the whole file again would revert those changes and,
since the file changed, restart the master. So the role owns only its keys:

  owned     set in place (or appended) when their value differs; null or an empty
            string removes the key (no key of cluster.properties takes an empty value)
  initial   runtime keys (mode, read-only, parameters...): written only when absent (an
            empty value: none), so the inventory gives their first value and the running
            master owns them after
  workers   worker URLs the inventory expects: added as worker.<max n + 1>.url when no
            worker.<n>.url has the same host:port; one with another scheme (TLS switched
            on) is updated in place. Workers added at runtime are left alone.
  removed_workers  URLs whose worker.<n>.url lines are removed (remove_worker.yml)
  peers     {id (or node_id: a topology node), url}: added as peer.<n>.id/url when no
            peer.<n>.id has the id; the url is updated in place. Peers added at runtime
            are left alone.

Values are compared after unescaping, so a file the master rewrote (javaproperties
escapes ':' and '=') is not "changed" by its formatting alone, and lines, comments and
order are kept. A new file starts with ``header``. The result is checked by ``validate``
(e.g. ``txcluster check-config %s``) before it replaces the file atomically. Supports
check mode and --diff.
"""

from __future__ import annotations

import os
import re
import tempfile
from urllib.parse import urlsplit

DOCUMENTATION = r"""
module: txcluster_properties
short_description: Merge the role-owned keys into a txcluster master's cluster.properties
description:
  - Sets the keys the role owns, writes runtime keys only when absent, adds expected
    workers and peers with stable numbers, and keeps everything the master changed at
    runtime (see the module's docstring).
options:
  path: {type: path, required: true, description: The cluster.properties file.}
  owned:
    type: dict
    default: {}
    description: "Role-owned keys: value, or null or empty to remove the key."
  initial: {type: dict, default: {}, description: Runtime keys written only when absent.}
  workers: {type: list, elements: str, default: [], description: Worker URLs to make sure of.}
  removed_workers: {type: list, elements: str, default: [], description: Worker URLs to remove.}
  peers:
    type: list
    elements: dict
    default: []
    description: "Peers {id or node_id, url} to make sure of."
  header: {type: list, elements: str, default: [], description: Comment lines of a new file.}
  validate: {type: str, description: Command checking the new file (%s is its path).}
extends_documentation_fragment: [files]
author: txcluster
"""

EXAMPLES = r"""
- name: Merge cluster.properties
  txcluster.cluster.txcluster_properties:
    path: /etc/txcluster/master/cluster.properties
    owned: {node-id: m1, log-level: INFO, max-peer-lag-s: null}
    initial: {mode: NORMAL}
    workers: [http://10.0.0.5:7300]
    peers: [{id: m2, url: http://10.0.1.1:7200}]
    validate: /opt/txcluster/venv/bin/txcluster check-config %s
"""

RETURN = r"""
values: {description: The keys and values of the resulting file., returned: always, type: dict}
"""

WORKER_KEY = re.compile(r"worker\.([1-9][0-9]*)\.url")
PEER_ID_KEY = re.compile(r"peer\.([1-9][0-9]*)\.id")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)


# ---- java.util.Properties, the part these files use ----

def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        c = m.group(1)
        if c.startswith("u") and len(c) == 5:
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)

    # \ud83d\ude00: a character outside the BMP is written as a UTF-16 surrogate pair.
    return _ESCAPE.sub(one, text).encode("utf-16", "surrogatepass").decode("utf-16")


def escape(text: str, key: bool = False) -> str:
    """As javaproperties writes it (master_service persists with javaproperties)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append("".join(f"\\u{u:04x}" for u in _utf16(ch)))
        else:
            out.append(ch)
    return "".join(out)


def _utf16(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def _split_logical(raw: str) -> tuple[str, str]:
    """(key, value) of one logical line (continuations joined, leading blanks gone)."""
    i, n = 0, len(raw)
    while i < n and raw[i] not in "=: \t\f":
        i += 2 if raw[i] == "\\" else 1
    key = raw[:i]
    while i < n and raw[i] in " \t\f":
        i += 1
    if i < n and raw[i] in "=:":
        i += 1
        while i < n and raw[i] in " \t\f":
            i += 1
    return _unescape(key), _unescape(raw[i:])


def parse(text: str) -> list[list]:
    """Entries [key or None, value or None, [physical lines]] in file order; key None for
    comments and blank lines."""
    entries: list[list] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip(" \t\f")
        if not stripped or stripped[0] in "#!":
            entries.append([None, None, [line]])
            i += 1
            continue
        physical, logical = [line], stripped
        while _continues(logical) and i + 1 < len(lines):
            i += 1
            physical.append(lines[i])
            logical = logical[:-1] + lines[i].lstrip(" \t\f")
        key, value = _split_logical(logical)
        entries.append([key, value, physical])
        i += 1
    return entries


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def values_of(entries: list[list]) -> dict[str, str]:
    return {k: v for k, v, _ in entries if k is not None}


def render(entries: list[list]) -> str:
    return "".join(line + "\n" for _, _, lines in entries for line in lines)


# ---- the merge ----

def _authority(url: str) -> str:
    return (urlsplit(url).netloc or url).lower()


def merge(text: str | None, owned: dict, initial: dict, workers: list[str],
          removed_workers: list[str], peers: list[dict], header: list[str]) -> str:
    """The file's new text (equal to ``text`` when nothing the role owns differs)."""
    entries = parse(text) if text is not None else [[None, None, [f"# {h}" if h else "#"]]
                                                    for h in header]

    def find(key: str) -> list | None:
        return next((e for e in entries if e[0] == key), None)

    def put(key: str, value: str) -> None:
        entry = find(key)
        if entry is None:
            entries.append([key, value, [f"{escape(key, True)}={escape(value)}"]])
        elif entry[1] != value:
            entry[1], entry[2] = value, [f"{escape(key, True)}={escape(value)}"]

    for key, value in owned.items():
        if value is None or value == "":
            entries[:] = [e for e in entries if e[0] != key]
        else:
            put(key, str(value))
    for key, value in initial.items():
        # empty: no first value (sync-seed-from outside playbooks/add_peer.yml)
        if value is not None and value != "" and find(key) is None:
            put(key, str(value))

    gone = {_authority(u) for u in removed_workers}
    entries[:] = [e for e in entries if not (e[0] and WORKER_KEY.fullmatch(e[0])
                                            and _authority(e[1]) in gone)]
    for url in workers:
        if _authority(url) in gone:
            continue
        known = [e for e in entries if e[0] and WORKER_KEY.fullmatch(e[0])]
        same = next((e for e in known if _authority(e[1]) == _authority(url)), None)
        if same is not None:
            put(same[0], url)
        else:
            n = max((int(WORKER_KEY.fullmatch(e[0]).group(1)) for e in known), default=0)
            put(f"worker.{n + 1}.url", url)
    for peer in peers:
        peer_id = peer.get("id") or peer["node_id"]
        ids = [e for e in entries if e[0] and PEER_ID_KEY.fullmatch(e[0])]
        same = next((e for e in ids if e[1] == peer_id), None)
        if same is not None:
            n = PEER_ID_KEY.fullmatch(same[0]).group(1)
        else:
            numbers = [int(PEER_ID_KEY.fullmatch(e[0]).group(1)) for e in ids]
            n = str(max(numbers, default=0) + 1)
            put(f"peer.{n}.id", peer_id)
        put(f"peer.{n}.url", peer["url"])
    return render(entries)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "owned": {"type": "dict", "default": {}},
            "initial": {"type": "dict", "default": {}},
            "workers": {"type": "list", "elements": "str", "default": []},
            "removed_workers": {"type": "list", "elements": "str", "default": []},
            "peers": {"type": "list", "elements": "dict", "default": []},
            "header": {"type": "list", "elements": "str", "default": []},
            "validate": {"type": "str"},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    before = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            before = fh.read()
    after = merge(before, p["owned"], p["initial"], p["workers"], p["removed_workers"],
                  p["peers"], p["header"])
    changed = after != before
    result = {"changed": changed, "path": path, "values": values_of(parse(after))}
    if module._diff:
        result["diff"] = {"before": before or "", "after": after,
                          "before_header": path, "after_header": path}
    if changed and not module.check_mode:
        fd, tmp = tempfile.mkstemp(prefix=".cluster.properties.", dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(after)
        if p["validate"]:
            if "%s" not in p["validate"]:
                os.unlink(tmp)
                module.fail_json(msg="validate must contain %s")
            rc, out, err = module.run_command(p["validate"] % tmp)
            if rc != 0:
                os.unlink(tmp)
                module.fail_json(msg=f"failed to validate: {err or out}", rc=rc)
        module.atomic_move(tmp, path)
    file_args = module.load_file_common_arguments(p)
    if os.path.exists(path) or not module.check_mode:
        result["changed"] = module.set_fs_attributes_if_different(file_args, changed)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
