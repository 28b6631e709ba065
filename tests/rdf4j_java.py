"""RDF4J's Rio on the JVM for interop tests: Java sources in tests/java/ compiled by javac
against Debian's librdf4j-java (the Binary RDF tests: Rio converting, and RDF4J's HTTP
client against a cluster). Without a JDK or Rio, ``compile_java`` skips the test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

JAVA_DIR = Path(__file__).parent / "java"
JAVA_LIB = Path("/usr/share/java")
# Rio and what it needs at run time, all from Debian's packages (librdf4j-java and its
# dependencies); the ones not installed are left out of the classpath.
RDF4J_JARS = (
    "rdf4j-rio-binary", "rdf4j-rio-api", "rdf4j-model", "rdf4j-model-api",
    "rdf4j-model-vocabulary", "rdf4j-util", "rdf4j-rio-nquads", "rdf4j-rio-ntriples",
    "rdf4j-rio-datatypes", "rdf4j-rio-languages", "rdf4j-queryresultio-binary",
    "rdf4j-queryresultio-api", "rdf4j-query", "rdf4j-queryresultio-sparqljson",
    "rdf4j-queryresultio-sparqlxml", "rdf4j-rio-turtle", "rdf4j-rio-trig",
    "slf4j-api", "slf4j-nop", "commons-text", "commons-lang3", "commons-io", "guava",
    "jackson-core", "jackson-databind", "jackson-annotations",
)


def rio_missing() -> str | None:
    """Why the Rio interop tests cannot run here, or None."""
    if not (shutil.which("javac") and shutil.which("java")):
        return "needs a JDK (javac, java; Debian openjdk-17-jdk-headless)"
    if not (JAVA_LIB / "rdf4j-rio-binary.jar").exists():
        return "needs RDF4J's Rio (/usr/share/java/rdf4j-rio-binary.jar; Debian librdf4j-java)"
    return None


def rdf4j_classpath() -> list[str]:
    return [str(JAVA_LIB / f"{name}.jar") for name in RDF4J_JARS
            if (JAVA_LIB / f"{name}.jar").exists()]


def compile_java(source: Path, out: Path) -> str:
    """Compile ``source`` against Rio into ``out``; the classpath to run it with."""
    reason = rio_missing()
    if reason:
        pytest.skip(f"RDF4J interop test skipped: {reason}")
    jars = rdf4j_classpath()
    subprocess.run(["javac", "-cp", ":".join(jars), "-d", str(out), str(source)], check=True,
                   timeout=180)
    return ":".join([str(out), *jars])
