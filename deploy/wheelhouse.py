"""Build the wheelhouse that the Ansible roles install txcluster from (targets need no
internet): the txcluster wheel and a wheel of every runtime dependency, with a
requirements.txt pinning them all, packed as one tar the roles unpack on each node.

    python deploy/wheelhouse.py [--out build/wheelhouse] [--frozen] [--check]
    python deploy/wheelhouse.py --out DIR --from ARCHIVE --local-suffix upgrade1

Prints one JSON line: {"archive", "version", "python", "built"}. The txcluster version
gets a local label from a hash of the packaged sources (0.1.0+g1a2b3c4d5e6f), so:
  - a node's venv is upgraded whenever the code changes, even if setup.cfg's version
    did not (pip compares versions, not wheel contents);
  - building again from unchanged sources does nothing ("built": false) and the archive
    the roles copy stays the same file, which keeps `site.yml` idempotent.

--frozen reuses an archive already in --out whatever the sources are now: a test run
(Molecule) builds once and deploys that same build at every step, even while the
working tree changes under it. --check builds nothing and says whether it would
(``ansible-playbook --check``).

--from ARCHIVE --local-suffix S: the same dependency wheels as ARCHIVE and a txcluster
wheel rebuilt as version <its version>.S, in seconds: a new version to test a rolling
upgrade with (molecule/two_dc).

The wheelhouse holds the jmx extra (JPype1) too: a master with txcluster_master_jmx
needs it, and one set of wheels serves every node.

Wheels are built for the controller's interpreter (CPython major.minor, platform): the
roles' preflight checks that each target's python3 has the same major.minor.
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What goes into the wheel (setup.cfg packages + metadata files): its hash is the version.
METADATA = ("setup.cfg", "pyproject.toml", "README.md")


def packages() -> list[str]:
    """The top-level packages the wheel holds, as setup.cfg's [options.packages.find]
    includes them: a package added there is hashed here without a second list."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    names = cfg["options.packages.find"]["include"].split()
    return [n for n in names if "." not in n]


def source_files() -> list[Path]:
    files: list[Path] = []
    for name in (*METADATA, *packages()):
        p = REPO / name
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files += [f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                      and f.suffix not in (".pyc", ".pyo")]
    return sorted(files)


def source_hash(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(REPO)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def base_version() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg["metadata"]["version"]


_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def pins(wheel_dir: Path) -> list[str]:
    """name==version for each wheel (wheel file names escape '-' in names as '_')."""
    lines = []
    for wheel in sorted(wheel_dir.glob("*.whl")):
        m = _WHEEL_NAME.match(wheel.name)
        if m is None:
            raise SystemExit(f"unexpected wheel file name {wheel.name}")
        name = re.sub(r"[-_.]+", "-", m["name"]).lower()
        lines.append(f"{name}=={m['version']}")
    return lines


def _described(archive: Path) -> dict:
    m = re.fullmatch(r"txcluster-wheelhouse-(?P<version>.+)-cp(?P<major>\d)(?P<minor>\d+)\.tar",
                     archive.name)
    if m is None:
        raise SystemExit(f"{archive} is not a wheelhouse archive")
    return {"archive": str(archive), "version": m["version"],
            "python": f"{m['major']}.{m['minor']}", "built": False}


EXTRAS = "jmx"  # setup.cfg extras every wheelhouse carries


def build(out: Path, frozen: bool = False, check: bool = False,
          base: Path | None = None, local_suffix: str | None = None) -> dict:
    if frozen:
        existing = sorted(out.glob("txcluster-wheelhouse-*.tar"))
        if existing:
            return _described(existing[-1])
    files = source_files()
    if base is not None:
        version = f"{_described(base)['version']}.{local_suffix}"
    else:
        version = f"{base_version()}+g{source_hash(files)}"
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    name = f"txcluster-wheelhouse-{version}-{py}"
    archive = out / f"{name}.tar"
    result = _described(archive)
    if archive.exists():
        return result
    if check:
        return {**result, "built": True}
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wheelhouse-", dir=out) as tmp:
        src, wheels = Path(tmp) / "src", Path(tmp) / name
        for f in files:  # a copy of the sources whose setup.cfg carries the local version
            dest = src / f.relative_to(REPO)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
        cfg = (src / "setup.cfg").read_text()
        (src / "setup.cfg").write_text(
            re.sub(r"(?m)^version\s*=.*$", f"version = {version}", cfg, count=1))
        pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet",
                     "--disable-pip-version-check", "--wheel-dir", str(wheels)]
        if base is not None:  # the dependencies of the base archive, txcluster rebuilt
            wheels.mkdir(parents=True)
            with tarfile.open(base) as tar:
                for member in tar.getmembers():
                    wheel = Path(member.name).name
                    if member.isfile() and wheel.endswith(".whl") and \
                            not wheel.startswith("txcluster-"):
                        member.name = wheel
                        tar.extract(member, wheels, filter="data")
            subprocess.run([*pip_wheel, "--no-deps", str(src)], check=True, stdout=sys.stderr)
        else:
            subprocess.run([*pip_wheel, f"{src}[{EXTRAS}]"], check=True, stdout=sys.stderr)
        (wheels / "requirements.txt").write_text("\n".join(pins(wheels)) + "\n")
        partial = archive.with_suffix(".tar.partial")
        with tarfile.open(partial, "w") as tar:
            tar.add(wheels, arcname=name)
        os.replace(partial, archive)
    for old in out.glob("txcluster-wheelhouse-*.tar"):  # only the newest is ever deployed
        if old != archive:
            old.unlink()
    result["built"] = True
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "wheelhouse",
                        help="directory of the archive (default: build/wheelhouse)")
    parser.add_argument("--frozen", action=argparse.BooleanOptionalAction, default=False,
                        help="reuse an archive already in --out, even if the sources changed")
    parser.add_argument("--check", action="store_true",
                        help="build nothing; say whether a build would happen")
    parser.add_argument("--from", dest="base", type=Path, default=None,
                        help="reuse this archive's dependency wheels (with --local-suffix)")
    parser.add_argument("--local-suffix", default=None,
                        help="with --from: the new version is the archive's + '.SUFFIX'")
    args = parser.parse_args()
    if (args.base is None) != (args.local_suffix is None):
        parser.error("--from and --local-suffix go together")
    if args.local_suffix is not None and not re.fullmatch(r"[a-z0-9]+", args.local_suffix):
        parser.error("--local-suffix: lowercase letters and digits")
    print(json.dumps(build(args.out.resolve(), frozen=args.frozen, check=args.check,
                           base=args.base.resolve() if args.base else None,
                           local_suffix=args.local_suffix)))


if __name__ == "__main__":
    main()
