"""The Ansible collection's Python as plain modules (no Ansible needed): the filter plugin
that reads the cluster's layout from the inventory, and the module that merges
cluster.properties (shared by the plugin tests and the lint of the shipped inventories).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


topology_plugin = _load(ROOT / "plugins/filter/txcluster_topology.py")
properties_module = _load(ROOT / "plugins/modules/txcluster_properties.py")
topology = topology_plugin.txcluster_topology
problems = topology_plugin.txcluster_topology_problems
merge = properties_module.merge
