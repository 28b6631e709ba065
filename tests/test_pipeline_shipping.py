"""What is shipped to a Spark cluster's executors (spark_pipeline/shipping.py), checked
without a cluster: the executor side imports only what is shipped, the code zip holds
its packages, and the session asks for the archive only off local mode.
(tests/test_pipeline_cluster.py runs it all on a standalone cluster.)"""

from __future__ import annotations

import ast
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from spark_pipeline import shipping

ROOT = Path(__file__).resolve().parents[1]
# What the executors import: the functions shipped by mapInArrow, the accumulator and
# what sends an initial load's parts.
EXECUTOR_MODULES = ("spark_pipeline.transform", "spark_pipeline.rdf", "spark_pipeline.progress",
                    "spark_pipeline.part_push")


def _imports(module: str) -> set[str]:
    """Modules imported at the top level of ``module`` and, recursively, of the
    project's modules it imports (absolute names)."""
    seen: set[str] = set()
    todo = [module]
    out: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        tree = ast.parse((ROOT / (name.replace(".", "/") + ".py")).read_text())
        for node in tree.body:  # top level only: lazy imports inside functions are not run
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                out.add(n)
                if n.split(".")[0] in shipping.EXECUTOR_PACKAGES and \
                        (ROOT / (n.replace(".", "/") + ".py")).exists():
                    todo.append(n)
    return out


def test_the_executor_side_imports_only_what_is_shipped():
    provided = {top for top, dists in metadata.packages_distributions().items()
                if any(d.lower() in shipping.EXECUTOR_DISTRIBUTIONS for d in dists)}
    allowed = {*sys.stdlib_module_names, *shipping.EXECUTOR_PACKAGES, *provided,
               "pyspark", "py4j"}  # pyspark and py4j: every node's Spark
    tops = {n.split(".")[0] for m in EXECUTOR_MODULES for n in _imports(m)}
    assert tops - allowed == set()
    assert {"pyoxigraph", "xxhash", "numpy", "pyarrow", "rdfcore"} <= tops
    assert "txcluster" not in tops and "httpx" not in tops


def test_the_code_zip_holds_the_executor_packages(tmp_path):
    path = shipping.code_zip(tmp_path)
    names = zipfile.ZipFile(path).namelist()
    assert "spark_pipeline/transform.py" in names and "rdfcore/fingerprint.py" in names
    assert not [n for n in names if not n.startswith(("spark_pipeline/", "rdfcore/"))]
    assert shipping.code_zip(tmp_path) == path  # named by content: built once


def test_the_environment_holds_an_interpreter_and_the_distributions(tmp_path):
    # A small one (xxhash only) to keep it quick; the layout is the real one.
    dists = shipping.distributions(("xxhash",))
    path = shipping.build_env(tmp_path / "env.tar.gz", dists=dists)
    with tarfile.open(path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        wrapper = tar.extractfile("bin/python").read().decode()
    version = "python{}.{}".format(*sys.version_info[:2])
    assert members["bin/python"].mode & 0o111 and f'exec "$here/{version}' in wrapper
    assert f"lib/{version}/os.py" in members
    assert any(n.startswith(f"lib/{version}/site-packages/xxhash/") for n in members)
    assert not [n for n in members if "/test/" in n or "__pycache__" in n]


def test_shipment_choices(tmp_path, monkeypatch):
    archive = tmp_path / "prepacked.tar.gz"
    archive.write_bytes(b"")
    given = shipping.shipment(str(archive), tmp_path)
    assert given.conf == {"spark.archives": f"{archive}#environment",
                          "spark.pyspark.python": "./environment/bin/python"}
    assert given.submit_args()[:2] == ["--archives", f"{archive}#environment"]
    none = shipping.shipment("none", tmp_path)
    assert none.conf == {} and none.python is None and len(none.py_files) == 1
    with pytest.raises(ValueError, match="no such archive"):
        shipping.shipment(str(tmp_path / "missing.tar.gz"), tmp_path)
    monkeypatch.setattr(shipping, "cached_env", lambda directory=None: tmp_path / "built.tgz")
    built = shipping.shipment(None, tmp_path)
    assert built.conf["spark.archives"] == f"{tmp_path / 'built.tgz'}#environment"


def test_audit_on_a_cluster_needs_a_shared_work_dir():
    from click.testing import CliRunner

    from txcluster.cli import main

    result = CliRunner().invoke(main, ["audit", "--worker", "http://127.0.0.1:1", "--worker",
                                       "http://127.0.0.1:2", "--spark-master",
                                       "spark://127.0.0.1:1"])
    assert result.exit_code == 2 and "give --work-dir" in result.output
