"""Where inputs and outputs are: local paths and the URLs Hadoop's FileSystem API knows
(pure: strings in, strings out; ``hadoop_fs`` does the IO).

The rules (issue 20 item 3, docs/design/pipeline-on-spark.md#inputs-and-outputs-as-urls):

* A location with a scheme (``hdfs://nn/data``, ``s3a://bucket/x``, ``file:///data``) is
  a Hadoop URL: it is listed and read through Hadoop's FileSystem on the JVM side.
* A location without one is a path of the driver's filesystem, made absolute (``~``
  expanded) and given to Hadoop as ``file:`` — never resolved against the cluster's
  default filesystem (``fs.defaultFS``, HDFS on YARN), which would make ``/data`` mean
  another place for Spark's readers than for the user.
* An input file is *named* by its Hadoop path string (``Path.toString``: the URL as
  typed, not percent-encoded: ``hdfs://nn:8020/data/a b.nt``), except on ``file:`` where
  it is the local path, as before URLs were accepted: rejects, blank node scopes and the
  progress line keep their names. Spark's readers report a file as a percent-encoded URI
  (``_metadata.file_path``): ``name_of_uri`` gives the same name back.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

# A scheme as RFC 3986 spells it, followed by ":/" (a Hadoop URL always has a path): a
# local name such as "a:b.nt" is not taken for a URL.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")

# The Hadoop modules that bring the FileSystem of the common object stores, with the
# Maven coordinates ``--packages`` takes (their version is Spark's Hadoop version, except
# the GCS connector, which Google versions on its own).
CONNECTORS = {
    "s3a": "org.apache.hadoop:hadoop-aws:{hadoop}",
    "abfs": "org.apache.hadoop:hadoop-azure:{hadoop}",
    "abfss": "org.apache.hadoop:hadoop-azure:{hadoop}",
    "wasb": "org.apache.hadoop:hadoop-azure:{hadoop}",
    "wasbs": "org.apache.hadoop:hadoop-azure:{hadoop}",
    "oss": "org.apache.hadoop:hadoop-aliyun:{hadoop}",
    "gs": "com.google.cloud.bigdataoss:gcs-connector:<a hadoop3 release>",
}
# Schemes whose connector is another one's (Hadoop's own advice).
SCHEME_ADVICE = {"s3": "s3a", "s3n": "s3a"}


def scheme(location: str) -> str | None:
    """The URL scheme of a location (lowercase), None for a local path."""
    found = _URL.match(location)
    return found.group(1).lower() if found else None


def is_local(location: str) -> bool:
    """A path of the driver's filesystem: no scheme, or ``file:``."""
    return scheme(location) in (None, "file")


def hadoop_location(given: str) -> str:
    """What Hadoop's ``Path`` is given for a location the user typed: a URL as it is, a
    local path absolute (``~`` expanded) with ``file:`` before it."""
    if scheme(given) is not None:
        return given
    return "file:" + os.path.abspath(os.path.expanduser(given))


def name_of(hadoop_path: str) -> str:
    """An input file's name from its Hadoop path string (``Path.toString``, as a listing
    gives it: not percent-encoded): on ``file:`` the local path, else the string."""
    if hadoop_path.startswith("file:"):
        rest = hadoop_path[len("file:"):]
        rest = rest[2:] if rest.startswith("///") else rest  # file:///x (no host)
        if rest.startswith("/") and not rest.startswith("//"):
            return rest
    return hadoop_path


def name_of_uri(uri: str) -> str:
    """An input file's name from the URI Spark's readers report (``_metadata.file_path``:
    percent-encoded, ``file:/tmp/a%20b.nt``): the same name as ``name_of`` gives."""
    parsed = urlsplit(uri)
    if parsed.scheme in ("file", ""):
        return unquote(parsed.path)
    authority = f"//{parsed.netloc}" if uri[len(parsed.scheme) + 1:].startswith("//") else ""
    return f"{uri[:len(parsed.scheme)]}:{authority}{unquote(parsed.path)}"


def reader_path(name: str) -> str:
    """The Hadoop path string of an input file's name, for Spark's readers and the
    FileSystem API: a local path with ``file:`` before it, a URL's name as it is."""
    return "file:" + name if scheme(name) is None else name


def file_uri(path: str) -> str:
    """A local path as a ``file://`` URL (what the user may give for it: Hadoop takes a
    URL's path as it is written, not percent-decoded)."""
    return "file://" + os.path.abspath(path)


def child(location: str, name: str) -> str:
    """``name`` inside the directory ``location`` (a URL or a Hadoop path string)."""
    return location.rstrip("/") + "/" + name


def missing_filesystem(location: str, hadoop_version: str) -> str:
    """The message for a URL whose scheme has no FileSystem in this Spark: what to add."""
    given = scheme(location) or "?"
    target = SCHEME_ADVICE.get(given, given)
    if target != given:
        return (f"{location}: Hadoop has no FileSystem for '{given}:' here; use "
                f"'{target}://' URLs (Hadoop's {target.upper()} connector) instead")
    package = CONNECTORS.get(target)
    if package is None:
        return (f"{location}: this Spark has no Hadoop FileSystem for the scheme "
                f"'{given}' (add the jar that provides it, e.g. with --spark-conf "
                "spark.jars.packages=GROUP:ARTIFACT:VERSION)")
    coordinates = package.format(hadoop=hadoop_version)
    return (f"{location}: this Spark has no Hadoop FileSystem for the scheme '{given}': "
            f"add {coordinates.split(':')[1]} (--spark-conf spark.jars.packages="
            f"{coordinates}, or spark-submit --packages {coordinates}) and its "
            f"credentials (--spark-conf spark.hadoop.fs.{given}.*)")


def is_missing_filesystem(java_error: str) -> bool:
    """Whether a Java exception's text (``Throwable.toString`` with its causes) says a
    scheme has no FileSystem: none mapped (``No FileSystem for scheme``), or its class
    mapped by Hadoop's defaults but not on the classpath (s3a without hadoop-aws)."""
    return ("UnsupportedFileSystemException" in java_error
            or "No FileSystem for scheme" in java_error
            or ("ClassNotFoundException" in java_error and "FileSystem" in java_error))


def first_line(java_error: str) -> str:
    """The useful part of a Java exception's text: its first line."""
    return java_error.strip().splitlines()[0] if java_error.strip() else "unknown error"
