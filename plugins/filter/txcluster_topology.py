"""The cluster as the inventory describes it, for templates and preflight asserts.

A master's cluster.properties names its workers (``worker.<n>.url``: the workers of its
own data centre) and its peers (``peer.<n>.id`` / ``peer.<n>.url``: the masters of the
other data centres). Those come from *other* hosts' variables, and ``hostvars[other]``
does not see role defaults, so every node's identity is derived here, once, from the
inventory: the groups ``txcluster_workers`` and ``txcluster_masters`` and these host or
group variables (documented in txcluster_common's meta/argument_specs.yml):

    txcluster_common_datacenter      required: the data centre of the node
    txcluster_common_address         how other nodes reach it (default: ansible_host, else
                                     the inventory name)
    txcluster_common_worker_port     worker HTTP port
    txcluster_common_master_port     master HTTP port
    txcluster_common_master_node_id  a master's node-id (default: the inventory name);
                                     unique across the whole cluster (sync protocol)

Defaults for the ports come from the calling role (txcluster_common's defaults), so
there is one default for each value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

WORKERS_GROUP = "txcluster_workers"
MASTERS_GROUP = "txcluster_masters"


def _node(host: str, hv: Mapping[str, Any], port_var: str, default_port: int,
          scheme: str) -> dict:
    address = hv.get("txcluster_common_address") or hv.get("ansible_host") or host
    port = int(hv.get(port_var) or default_port)
    return {
        "host": host,
        "datacenter": hv.get("txcluster_common_datacenter"),
        "address": str(address),
        "port": port,
        "url": f"{scheme}://{address}:{port}",
    }


def txcluster_topology(groups: Mapping[str, list], hostvars: Mapping[str, Mapping],
                       worker_port: int, master_port: int, scheme: str = "http") -> dict:
    """{"workers": [node...], "masters": [node + node_id...]} in inventory order. The
    scheme is the cluster's (txcluster_common_tls: one switch for every node)."""
    workers = [_node(h, hostvars[h], "txcluster_common_worker_port", worker_port, scheme)
               for h in groups.get(WORKERS_GROUP, [])]
    masters = []
    for h in groups.get(MASTERS_GROUP, []):
        node = _node(h, hostvars[h], "txcluster_common_master_port", master_port, scheme)
        node["node_id"] = str(hostvars[h].get("txcluster_common_master_node_id") or h)
        masters.append(node)
    return {"workers": workers, "masters": masters}


def txcluster_topology_problems(topology: Mapping[str, list]) -> list[str]:
    """What makes a topology unusable (empty: none), for the preflight asserts."""
    problems = []
    workers, masters = topology["workers"], topology["masters"]
    for node in workers + masters:
        if not node["datacenter"]:
            problems.append(f"{node['host']}: txcluster_common_datacenter is not set")
    for what, values in (
        ("master node id", [m["node_id"] for m in masters]),
        ("node URL", [n["url"] for n in workers + masters]),
    ):
        problems += [f"{what} '{v}' is used {c} times" for v, c in Counter(values).items()
                     if c > 1]
    worker_dcs = {w["datacenter"] for w in workers}
    master_dcs = {m["datacenter"] for m in masters}
    # A worker belongs to exactly one master: the one of its data centre.
    problems += [f"data centre '{dc}' has {c} masters (one per data centre)"
                 for dc, c in Counter(m["datacenter"] for m in masters).items() if c > 1]
    for m in masters:
        if m["datacenter"] not in worker_dcs:
            problems.append(f"master {m['host']} has no worker in data centre "
                            f"'{m['datacenter']}'")
    for w in workers:
        if w["datacenter"] not in master_dcs:
            problems.append(f"worker {w['host']} has no master in data centre "
                            f"'{w['datacenter']}'")
    return problems


class FilterModule:
    def filters(self) -> dict:
        return {
            "txcluster_topology": txcluster_topology,
            "txcluster_topology_problems": txcluster_topology_problems,
        }
