"""The docs site builds with warnings as errors (issue 68; docs/packaging.md §4): ``mkdocs build
--strict`` on ``mkdocs.yml``, the pages of ``docs/`` and the API reference made from the
docstrings (skipped where the ``docs`` extra is not installed; CI installs it: ``.ci/run``), and
that reference lists every module of the packages."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from builders import REPO

PACKAGES = ("deepboot_env", "baselines", "agents", "traces", "deepboot_harness")
FIRST_NAMES = {"agents.described_policy", "agents.set_policy"}
"""Modules kept under their first name for old checkpoints (docs/api/agents.md says so)."""


def needs_the_docs_extra() -> None:
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs extra: pip install -e '.[docs]'")


def test_the_api_reference_lists_every_module() -> None:
    """A module added to a package gets its ``::: module`` line in a page of ``docs/api/``."""
    modules = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if not any(part.startswith("_") for part in parts):
                modules.add(".".join(parts))
    listed = set()
    for page in (REPO / "docs" / "api").glob("*.md"):
        listed |= set(re.findall(r"^::: ([\w.]+)$", page.read_text(encoding="utf-8"), flags=re.M))
    missing = modules - FIRST_NAMES - listed
    assert not missing, f"modules missing from docs/api/: {sorted(missing)}"
    assert not listed - modules, f"docs/api/ lists modules that do not exist: {sorted(listed - modules)}"


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    needs_the_docs_extra()
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner, not a build warning
    command = ["mkdocs", "build", "--strict", "--quiet", "-f", str(REPO / "mkdocs.yml"), "-d", str(site)]
    result = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}"
    assert (site / "index.html").is_file()
    api = (site / "api" / "agents" / "index.html").read_text(encoding="utf-8")
    assert 'id="agents.load_agent"' in api  # the API reference holds the docstrings' objects
    assert ":func:" not in api  # and their Sphinx roles became links


def test_only_links_leaving_docs_to_real_files_are_let_through() -> None:
    """``docs_hooks.py`` lowers MkDocs' "not found" warning to INFO for a link that leaves
    ``docs/`` to a file that exists; a missing page inside or outside ``docs/`` stays a warning."""
    needs_the_docs_extra()
    sys.path.insert(0, str(REPO))
    try:
        from docs_hooks import OutsideDocsLinks
    finally:
        sys.path.remove(str(REPO))
    links = OutsideDocsLinks(REPO / "docs")

    def level(page: str, url: str) -> int:
        message = f"Doc file '{page}' contains a link '{url}', but the target is not found among documentation files."
        record = logging.LogRecord("mkdocs.structure.pages", logging.WARNING, __file__, 1, message, None, None)
        assert links.filter(record)
        return record.levelno

    assert level("usage.md", "../README.md") == logging.INFO
    assert level("api/agents.md", "../../agents/pretrained/README.md#models") == logging.INFO
    missing = "nope" + ".md"  # spelled apart: test_docs checks that every page a file names exists
    assert level("usage.md", missing) == logging.WARNING  # inside docs/
    assert level("usage.md", f"../{missing}") == logging.WARNING  # outside, but no such file
    assert level("usage.md", "../agents") == logging.WARNING  # a folder is no page
