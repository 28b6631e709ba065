"""The roles, playbooks, inventories and the Molecule scenario pass ansible-lint's
production profile, with no rule skipped. Offline: Galaxy is not reachable and nothing
outside ansible.builtin is used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_ansible_lint_production_profile():
    if not (BIN / "ansible-lint").exists():
        pytest.skip("ansible-lint is not installed (pip install -e '.[deploy]')")
    result = subprocess.run(
        [str(BIN / "ansible-lint"), "--offline", "--nocolor", "--profile", "production",
         "roles", "playbooks", "inventory", "molecule"],
        cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"})
    assert result.returncode == 0, result.stdout + result.stderr
