"""The repository explains its own model: every document it cites is in the repo, and every
cited section of ``docs/`` exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_MD = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md)\b")
GENERATED = {"results.md", "leaderboard.md"}
"""Markdown files the tools write (the tables of ``deepboot compare`` and ``deepboot benchmark``),
not documents to cite."""

_SECTION = re.compile(r"(docs/[\w-]+\.md) §(\d+(?:\.\d+)*)")


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    suffixes = {".py", ".md", ".json", ".yml", ".yaml", ".toml", ".txt", ".csv"}
    return [ROOT / line for line in out.splitlines() if Path(line).suffix in suffixes and (ROOT / line).is_file()]


def test_every_cited_markdown_document_is_in_the_repo() -> None:
    names = {p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts}
    missing = []
    for path in tracked_text_files():
        if path.suffix == ".csv":
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for ref in _MD.findall(line):
                if Path(ref).name not in names | GENERATED and not (path.parent / ref).exists():
                    missing.append(f"{path.relative_to(ROOT)}:{lineno}: {ref}")
    assert not missing, "\n".join(missing)


def test_every_cited_docs_section_exists() -> None:
    headings: dict[str, set[str]] = {}
    for doc in (ROOT / "docs").glob("*.md"):
        headings[f"docs/{doc.name}"] = set(re.findall(r"^#+ §(\d+(?:\.\d+)*)\b", doc.read_text(), flags=re.M))
    bad = []
    for path in tracked_text_files():
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for doc, section in _SECTION.findall(line):
                if section not in headings.get(doc, set()):
                    bad.append(f"{path.relative_to(ROOT)}:{lineno}: {doc} §{section}")
    assert not bad, "\n".join(bad)
