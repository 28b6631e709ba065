"""The suite's own rules (tests/conftest.py, ARCHITECTURE.md "Working on the code"): a test
module imports no other test module (what tests share lives in helper modules), and a test
without the ``processes`` mark that starts a program fails, even when the refusal is
caught on the way, so that no such test runs unnoticed in ``make check``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_no_test_module_imports_another():
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] + [a.name for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            if any(part.startswith("test_") for name in names for part in name.split(".")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], "move what they share into a helper module of tests/"


PROBE = textwrap.dedent("""
    import subprocess

    import pytest


    def test_unmarked_starts_a_program():
        subprocess.run(["true"], check=True)


    def test_unmarked_catches_the_refusal_and_goes_on():
        try:
            subprocess.run(["true"], check=True)
        except BaseException:
            pass


    def test_unmarked_starts_none():
        assert True


    @pytest.mark.processes
    def test_marked_starts_a_program():
        subprocess.run(["true"], check=True)
""")


@pytest.mark.processes
def test_an_unmarked_test_that_starts_a_program_fails(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "-o", "markers=processes", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=300)
    out = r.stdout + r.stderr
    assert "2 failed, 2 passed" in out, out
    program = "(subprocess.Popen ['true']): mark it `processes`"
    assert f"::test_unmarked_starts_a_program starts a program {program}" in out, out
    assert (f"::test_unmarked_catches_the_refusal_and_goes_on tried to start a program {program}"
            in out), out
