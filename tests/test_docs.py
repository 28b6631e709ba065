"""The documentation cannot drift from the code: the generated references equal what the
code generates, every configuration key and MBean member is in them, every CLI command
and every metric is documented, and every relative link points at a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from master_service.config import SCHEMA as MASTER_SCHEMA
from txcluster import docs
from txcluster.cli import main as cli
from worker_service.config import SCHEMA as WORKER_SCHEMA

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_generated_references_are_up_to_date():
    assert docs.stale() == [], (
        "docs/reference differs from the code: run `python -m txcluster.docs` and commit")


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    assert docs.main(["--dir", str(tmp_path)]) == 0
    assert docs.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "properties.md").write_text("edited by hand\n")
    assert docs.main(["--check", "--dir", str(tmp_path)]) == 1
    assert "properties.md differs from the code" in capsys.readouterr().err


def test_every_configuration_key_is_in_the_reference():
    text = (DOCS / "reference" / "properties.md").read_text()
    for key in (*MASTER_SCHEMA.keys, *WORKER_SCHEMA.keys):
        assert f"| `{key.name}` |" in text, key.name
    for name in ("worker.<n>.url", "peer.<n>.id", "peer.<n>.url"):
        assert f"| `{name}` |" in text


def test_every_mbean_member_is_in_the_reference():
    mbean = pytest.importorskip("master_service.jmx.attributes")
    text = (DOCS / "reference" / "jmx.md").read_text()
    for a in mbean.ATTRIBUTES:
        assert f"| `{a.name}` |" in text, a.name
    for op in mbean.OPERATIONS:
        assert f" {op.name}(" in text, op.name


def test_markdown_cells_are_escaped():
    assert docs._cell("read|write <n>\nnext") == "read\\|write &lt;n> next"


def test_every_cli_command_is_documented():
    documented = (DOCS / "operations.md").read_text()
    missing = [name for name in cli.commands if f"`txcluster {name}" not in documented]
    assert missing == [], f"commands missing from docs/operations.md: {missing}"


def test_every_metric_is_documented():
    source = (ROOT / "master_service" / "api" / "metrics.py").read_text()
    names = set(re.findall(r'"(txcluster_[a-z_]+)"', source))
    assert len(names) > 15
    documented = (DOCS / "operations.md").read_text()
    # Counters are exposed with _total (prometheus-client adds it); the table says so.
    missing = [n for n in sorted(names) if f"`{n}`" not in documented
               and f"`{n}_total`" not in documented]
    assert missing == [], f"metrics missing from docs/operations.md: {missing}"


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "deploy" / "README.md",
            *sorted(DOCS.rglob("*.md"))]


# Files that live outside the repository (the original specification, notes of the
# sessions that built it): a page that cites them sends its reader nowhere.
OUTSIDE = re.compile(r"\.\./shared|\bspec/|\b(?:FACTS|STYLE)\.md|"
                     r"\b(?:txlog-sync-protocol|smart-replication|cluster-basics|"
                     r"how-the-cluster-works)\.txt")


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_cite_only_files_in_the_repository(page):
    cited = sorted({m.group(0) for m in OUTSIDE.finditer(page.read_text())})
    assert cited == [], (f"{page.relative_to(ROOT)} cites {cited}: cite docs/design/ "
                         "instead")


def source_files() -> list[Path]:
    roots = ("master_service", "worker_service", "txcluster", "spark_pipeline", "rdfcore",
             "rdf4j_protocol", "tests", "bench", "deploy", "molecule", "roles", "playbooks")
    return [p for r in roots if (ROOT / r).is_dir() for p in sorted((ROOT / r).rglob("*"))
            if p.is_file() and p.suffix in {".py", ".sh", ".yml", ".txt", ".j2"}
            and p.name != "test_docs.py"] + [ROOT / "Makefile"]


def test_sources_cite_only_files_in_the_repository():
    cited = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in source_files()
             for m in OUTSIDE.finditer(p.read_text(errors="replace"))]
    assert cited == [], "cite docs/design/ instead:\n" + "\n".join(cited)


def test_design_pages_are_linked_from_the_index():
    index = (DOCS / "design" / "README.md").read_text()
    pages = sorted(p.name for p in (DOCS / "design").glob("*.md") if p.name != "README.md")
    assert pages, "docs/design/ has no pages"
    missing = [name for name in pages if f"]({name})" not in index]
    assert missing == [], f"docs/design/README.md does not link {missing}"


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = page.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: broken links {broken}"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces
    to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_link_anchors_name_a_heading(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target) or "#" not in target:
            continue
        name, anchor = target.split("#", 1)
        linked = (page.parent / name).resolve() if name else page
        if linked.suffix != ".md" or not linked.exists():
            continue  # test_relative_links_resolve reports a missing file
        headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.M)
        if anchor not in {_anchor(h) for h in headings}:
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: links to no heading {broken}"
