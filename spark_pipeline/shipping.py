"""What a Spark cluster's executors need, shipped with the job (docs/design/pipeline-on-spark.md).

In local mode the executors are Python processes of the driver's own interpreter and
virtualenv. On a cluster (``--spark-master spark://...``, ``yarn``, ``k8s://...``) they
run on other hosts that have Spark and Java but neither this checkout nor this
virtualenv, so the job ships both, the way Spark clusters expect it:

* **the code**: a zip of the packages the executors import (``EXECUTOR_PACKAGES``:
  the pure transforms and per-record RDF work of spark_pipeline, and rdfcore's canonical
  terms and fingerprint), given to ``SparkContext.addPyFile`` (spark-submit's
  ``--py-files``);
* **the environment**: a relocatable tarball of this interpreter (its binary, libpython,
  the standard library) and the distributions the executor side imports
  (``EXECUTOR_DISTRIBUTIONS`` and what they require), given as ``spark.archives``
  (``--archives``; Spark unpacks it as ``./environment`` in each executor's working
  directory) with ``spark.pyspark.python=./environment/bin/python``. ``bin/python`` is a
  small sh script that runs the packed interpreter with its own ``lib/`` on the loader
  path, so nothing of the driver's filesystem is needed; the nodes need a compatible C
  library (the same Linux distribution and architecture as the driver).

The environment is built once per interpreter and set of distribution versions and kept
in ``$XDG_CACHE_HOME/txcluster`` (``~/.cache/txcluster``). ``--python-env PATH`` (or
``TXCLUSTER_PYTHON_ENV``) ships a prepacked archive instead (built by ``txcluster
spark-env`` or ``venv-pack``: ``bin/python`` at its top), and ``--python-env none`` ships
none: the executors then run ``PYSPARK_PYTHON`` as set on the driver (a Python installed
at the same path on every node).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

# The project's packages the executor side imports: spark_pipeline.transform, .rdf,
# .progress (its accumulator) and .part_push (an initial load's parts), and through rdf
# rdfcore.canonical and rdfcore.fingerprint.
# txcluster, httpx and the services are driver-side only (tests/test_pipeline_shipping.py
# checks the executor modules' imports against these lists).
EXECUTOR_PACKAGES = ("spark_pipeline", "rdfcore")
# Third-party distributions those modules import (pyspark and py4j come from the Spark
# installation of each node: $SPARK_HOME/python/lib is on the executors' PYTHONPATH).
EXECUTOR_DISTRIBUTIONS = ("pyoxigraph", "xxhash", "numpy", "pyarrow")
ENV_NAME = "environment"  # the directory the archive is unpacked as on executors
EXECUTOR_PYTHON = f"./{ENV_NAME}/bin/python"
NO_ENV = "none"
FORMAT = 1  # bump when the archive's layout changes (part of the cache key)

# Parts of the standard library and of distributions no executor imports.
_SKIP_DIRS = {"__pycache__", "test", "tests", "idlelib", "tkinter", "turtledemo",
              "ensurepip", "lib2to3", "include", "site-packages", "dist-packages"}
_SKIP_SUFFIXES = (".pyc", ".pyx", ".pxd", ".pxi", ".h", ".hpp", ".c", ".cc", ".cpp", ".a")

_WRAPPER = """#!/bin/sh
# The packed interpreter (spark_pipeline/shipping.py) with its own lib/ on the loader path.
here=$(cd "$(dirname "$0")" && pwd)
unset PYTHONHOME
LD_LIBRARY_PATH="$here/../lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" \\
PYTHONNOUSERSITE=1 exec "$here/{binary}" "$@"
"""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "txcluster"


def _skipped(rel: Path) -> bool:
    return any(p in _SKIP_DIRS for p in rel.parts[:-1]) or rel.name.endswith(_SKIP_SUFFIXES)


# ---- the code ----


def _package_files(package: str) -> Iterator[tuple[str, Path]]:
    root = Path(__import__(package).__file__).parent
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if not _skipped(rel):
            yield rel.as_posix(), path


def code_zip(directory: Path | None = None) -> Path:
    """A zip of ``EXECUTOR_PACKAGES`` (sources only), named by its content's hash."""
    files = [f for p in EXECUTOR_PACKAGES for f in _package_files(p)]
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    directory = directory or cache_dir()
    target = directory / f"txcluster-code-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        directory.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f"{target.name}.{os.getpid()}.part")
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
            for name, path in files:
                z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), path.read_bytes())
        os.replace(part, target)
    return target


# ---- the environment ----


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    out = []
    for req in dist.requires or []:
        if "extra" in req.partition(";")[2]:
            continue  # an optional feature's requirement
        match = re.match(r"[A-Za-z0-9._-]+", req)
        if match:
            out.append(match.group(0))
    return out


def distributions(names: tuple[str, ...] = EXECUTOR_DISTRIBUTIONS
                  ) -> list[metadata.Distribution]:
    """The named distributions and, recursively, what they require (as installed)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name in names:
                raise
            continue  # a requirement for another platform or Python
        seen[key] = dist
        todo += _requirement_names(dist)
    return [seen[k] for k in sorted(seen)]


@dataclass
class Interpreter:
    """This Python's pieces: the binary, its shared libpython (if any), the stdlib."""

    binary: Path
    stdlib: Path
    libpython: Path | None
    version: str = field(default_factory=lambda: "{}.{}".format(*sys.version_info[:2]))

    @classmethod
    def current(cls) -> Interpreter:
        binary = Path(os.path.realpath(sys.executable))
        stdlib = Path(sysconfig.get_path("stdlib"))
        libpython = None
        if sysconfig.get_config_var("Py_ENABLE_SHARED"):
            name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var(
                "LDLIBRARY")
            candidate = Path(sysconfig.get_config_var("LIBDIR") or "") / name
            libpython = candidate if candidate.exists() else None
        return cls(binary, stdlib, libpython)


def env_key(interpreter: Interpreter, dists: list[metadata.Distribution]) -> str:
    digest = hashlib.sha256(repr((FORMAT, str(interpreter.binary), sys.version,
                                  [(d.metadata["Name"], d.version) for d in dists])
                                 ).encode())
    return digest.hexdigest()[:16]


def _env_members(interpreter: Interpreter, dists: list[metadata.Distribution]
                 ) -> Iterator[tuple[str, Path]]:
    """(name in the archive, file) of everything but bin/python."""
    ver = f"python{interpreter.version}"
    yield f"bin/{interpreter.binary.name}", interpreter.binary
    if interpreter.libpython is not None:
        yield f"lib/{interpreter.libpython.name}", interpreter.libpython
    for path in sorted(interpreter.stdlib.rglob("*")):
        rel = path.relative_to(interpreter.stdlib)
        if path.is_file() and not _skipped(rel) and not rel.parts[0].startswith("config-"):
            yield f"lib/{ver}/{rel.as_posix()}", path
    for dist in dists:
        for entry in dist.files or []:
            rel = Path(str(entry))
            if ".." in rel.parts or _skipped(rel):
                continue  # scripts outside site-packages, caches, headers, tests
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                yield f"lib/{ver}/site-packages/{rel.as_posix()}", path


def build_env(target: Path, interpreter: Interpreter | None = None,
              dists: list[metadata.Distribution] | None = None) -> Path:
    """Write the relocatable environment to ``target`` (a .tar.gz, unpacked by Spark)."""
    interpreter = interpreter or Interpreter.current()
    dists = distributions() if dists is None else dists
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f"{target.name}.{os.getpid()}.part")
    with tarfile.open(part, "w:gz", compresslevel=3) as tar:
        for name, path in _env_members(interpreter, dists):
            tar.add(path, name, recursive=False)
        script = _WRAPPER.format(binary=interpreter.binary.name).encode()
        for name in ("bin/python", "bin/python3"):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(script), 0o755
            tar.addfile(info, io.BytesIO(script))
    os.replace(part, target)
    return target


def cached_env(directory: Path | None = None) -> Path:
    """The environment of this interpreter, built on first use."""
    interpreter = Interpreter.current()
    dists = distributions()
    directory = directory or cache_dir()
    target = directory / (f"txcluster-env-py{interpreter.version.replace('.', '')}-"
                          f"{env_key(interpreter, dists)}.tar.gz")
    return target if target.exists() else build_env(target, interpreter, dists)


# ---- what a session on a cluster is given ----


@dataclass(frozen=True)
class Shipment:
    conf: dict[str, str]  # Spark configuration (set before the context starts)
    py_files: tuple[str, ...]  # for SparkContext.addPyFile
    python: str | None  # the executors' Python (PYSPARK_PYTHON as the context starts)

    def submit_args(self, driver_python: str | None = None) -> list[str]:
        """The same as spark-submit options. ``driver_python``: the driver's Python (one
        with txcluster installed), else spark-submit would run the driver with
        ``spark.pyspark.python``, which is the executors' (it beats PYSPARK_DRIVER_PYTHON)."""
        args = []
        if "spark.archives" in self.conf:
            args += ["--archives", self.conf["spark.archives"]]
        if self.py_files:
            args += ["--py-files", ",".join(self.py_files)]
        if self.python:
            args += ["--conf", f"spark.pyspark.python={self.python}"]
        if driver_python:
            args += ["--conf", f"spark.pyspark.driver.python={driver_python}"]
        return args


def shipment(python_env: str | None = None, directory: Path | None = None) -> Shipment:
    """What to ship: the code always; the environment built here (``python_env`` None),
    the archive at ``python_env``, or none (``"none"``)."""
    py_files = (str(code_zip(directory)),)
    if python_env is not None and python_env.strip().lower() == NO_ENV:
        return Shipment({}, py_files, None)
    if python_env is None:
        archive = str(cached_env(directory))
    else:
        path, _, link = python_env.partition("#")
        if "://" not in path:  # a local file (hdfs://, s3a://, ... are Spark's to fetch)
            if not Path(path).expanduser().is_file():
                raise ValueError(f"--python-env {python_env}: no such archive")
            path = str(Path(path).expanduser().resolve())
        if link and link != ENV_NAME:
            raise ValueError(f"--python-env {python_env}: the archive is unpacked as "
                             f"'{ENV_NAME}'; leave out '#{link}'")
        archive = path
    return Shipment({"spark.archives": f"{archive}#{ENV_NAME}",
                     "spark.pyspark.python": EXECUTOR_PYTHON}, py_files, EXECUTOR_PYTHON)
