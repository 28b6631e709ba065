"""Stable <n> for ``worker.<n>.url`` and ``peer.<n>.*`` in a templated cluster.properties.

The master changes cluster.properties itself at runtime (admin API: a worker added as
``worker.<max n + 1>.url``, a removed one's line deleted) and keeps the <n> of every
worker in memory, to name the key it changes next. If Ansible renumbered the workers when
it templates the file again (after add_worker.yml, remove_worker.yml, or an inventory
reordered by hand), the running master would later delete or overwrite the wrong line.
So the template keeps the <n> a worker or peer already has in the current file and gives
new ones the next free numbers, as the master does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# key = value, key: value or key value (java.util.Properties); escapes in the value.
_LINE = re.compile(r"^\s*(?P<key>(?:worker|peer)\.(?P<n>[1-9][0-9]*)\.(?:url|id))"
                   r"\s*[=:\s]\s*(?P<value>.*?)\s*$")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")


def _unescape(value: str) -> str:
    def one(m: re.Match[str]) -> str:
        c = m.group(1)
        if c.startswith("u") and len(c) == 5:
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)

    return _ESCAPE.sub(one, value)


def current_numbers(properties_text: str, kind: str, field: str) -> dict[str, int]:
    """{value: n} of the ``<kind>.<n>.<field>`` keys in a properties file's text."""
    found: dict[str, int] = {}
    for line in (properties_text or "").splitlines():
        m = _LINE.match(line)
        if m and m["key"] == f"{kind}.{m['n']}.{field}":
            found.setdefault(_unescape(m["value"]), int(m["n"]))
    return found


def txcluster_numbered(wanted: Iterable[str], properties_text: str, kind: str,
                       field: str) -> list[list]:
    """[[n, value], ...] sorted by n: existing values keep their n, new ones get the next."""
    known = current_numbers(properties_text, kind, field)
    wanted = list(dict.fromkeys(wanted))  # first occurrence wins; preflight refuses dups
    kept = {v: known[v] for v in wanted if v in known}
    last = max(known.values(), default=0)  # never reuse a number the file has used
    result = [[n, v] for v, n in kept.items()]
    for v in wanted:
        if v not in kept:
            last += 1
            result.append([last, v])
    return sorted(result)


class FilterModule:
    def filters(self) -> dict:
        return {"txcluster_numbered": txcluster_numbered}
