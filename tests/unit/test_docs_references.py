"""What the code cites from docs/ is there, and nothing cites documents that are not."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIPPED = {".venv", ".git", "tests", "build"}


def _sources() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text()
            for path in ROOT.rglob("*.py")
            if not SKIPPED & set(path.relative_to(ROOT).parts)}


def test_every_cited_document_exists():
    cited = {(name, doc) for name, text in _sources().items()
             for doc in re.findall(r"docs/[\w-]+\.md", text)}
    assert len(cited) >= 5
    assert [c for c in cited if not (ROOT / c[1]).exists()] == []


def test_every_cited_rule_is_a_section_of_the_architecture():
    sections = {" ".join(title.split()) for title in
                re.findall(r"^#+ (.+)$", (ROOT / "docs/architecture.md").read_text(), re.M)}
    cited = {(name, " ".join(title.split())) for name, text in _sources().items()
             for title in re.findall(r'docs/architecture\.md,\s+"([^"]+)"', text)}
    assert len(cited) >= 5
    assert [c for c in cited if c[1] not in sections] == []


def test_no_citation_of_documents_outside_the_repository():
    cites = re.compile(r"STYLE(\.md)? point|DESIGN(\.md)? section|TASKFLOW-NOTES")
    assert [name for name, text in _sources().items() if cites.search(text)] == []
