"""The repository explains its own model: every document it cites is in the repo, and every
cited section of ``docs/`` exists. The README is a short user's page (issue 30): at most 250
lines, no machine notes, its links and anchors resolve, its commands parse with the real parsers,
and its Python snippets run."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from builders import FENCE, REPO, shell_commands

_MD = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md)\b")
GENERATED = {"results.md", "leaderboard.md"}
"""Markdown files the tools write (the tables of ``deepboot compare`` and ``deepboot benchmark``),
not documents to cite."""

_SECTION = re.compile(r"(docs/[\w-]+\.md) §(\d+(?:\.\d+)*)")


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    suffixes = {".py", ".md", ".json", ".yml", ".yaml", ".toml", ".txt", ".csv"}
    return [REPO / line for line in out.splitlines() if Path(line).suffix in suffixes and (REPO / line).is_file()]


def test_every_cited_markdown_document_is_in_the_repo() -> None:
    names = {p.name for p in REPO.rglob("*.md") if ".venv" not in p.parts}
    missing = []
    for path in tracked_text_files():
        if path.suffix == ".csv":
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for ref in _MD.findall(line):
                if Path(ref).name not in names | GENERATED and not (path.parent / ref).exists():
                    missing.append(f"{path.relative_to(REPO)}:{lineno}: {ref}")
    assert not missing, "\n".join(missing)


def test_every_cited_docs_section_exists() -> None:
    headings: dict[str, set[str]] = {}
    for doc in (REPO / "docs").glob("*.md"):
        headings[f"docs/{doc.name}"] = set(re.findall(r"^#+ §(\d+(?:\.\d+)*)\b", doc.read_text(), flags=re.M))
    bad = []
    for path in tracked_text_files():
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for doc, section in _SECTION.findall(line):
                if section not in headings.get(doc, set()):
                    bad.append(f"{path.relative_to(REPO)}:{lineno}: {doc} §{section}")
    assert not bad, "\n".join(bad)


# --- the README: short, its links resolve, its commands parse, its snippets run -------------------

README = REPO / "README.md"
README_MAX_LINES = 250
"""Issue 30: a README in the style of the field's model projects, at most about 250 lines."""

MACHINE_NOTES = ("../shared", "2-core", "development machine", "CI machines", "added afterwards", "on this machine")
"""Words of run histories, machine notes and contributors' data that belong in ``docs/``, not in
the README (timings with their machine: docs/results.md §9; contributors' commands: docs/usage.md §2)."""

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """The anchors a Markdown file defines: ``<a id="...">`` and its headings' slugs."""
    text = path.read_text(encoding="utf-8")
    ids = set(re.findall(r"<a id=\"([^\"]+)\"", text))
    return ids | {_slug(h) for h in re.findall(r"^#+ (.+)$", _without_fences(text), flags=re.M)}


def _without_fences(text: str) -> str:
    return FENCE.sub("", text)


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """Relative links of a Markdown file whose file or ``#anchor`` does not exist (named relative
    to ``root``)."""
    bad = []
    for lineno, line in enumerate(_without_fences(path.read_text(encoding="utf-8")).splitlines(), 1):
        for target in _LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                bad.append(f"{path.relative_to(root)}:{lineno}: {target} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
                bad.append(f"{path.relative_to(root)}:{lineno}: {target} (no such anchor)")
    return bad


def test_the_readme_is_short_and_holds_no_machine_notes() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md has {len(text.splitlines())} lines"
    found = [word for word in MACHINE_NOTES if word in text]
    assert not found, f"README.md mentions {found}: move it to docs/results.md or docs/usage.md"


def test_readme_and_docs_links_resolve() -> None:
    """Every relative link of the README and of ``docs/`` names a file that exists, and its
    ``#anchor`` (a ``<a id>`` or a heading) exists in that file."""
    bad = broken_links(README)
    for doc in sorted((REPO / "docs").glob("*.md")):
        bad += broken_links(doc)
    assert not bad, "\n".join(bad)


def test_broken_links_are_found(tmp_path: Path) -> None:
    md = ".md"  # spelled apart: the file names below are not documents this repository cites
    (tmp_path / f"b{md}").write_text('<a id="s1"></a>\n## §1 Title\n\n## Another heading, here\n', encoding="utf-8")
    page = tmp_path / f"a{md}"
    page.write_text(
        f"[ok](b{md}#s1) [ok](b{md}#another-heading-here) [ok](#top) [ok](https://x.org/#y)\n"
        f"[bad](b{md}#s2) [bad](c{md}) ![bad](b{md}#nope)\n\n# Top\n",
        encoding="utf-8",
    )
    assert [b.split(": ", 1)[1] for b in broken_links(page, root=tmp_path)] == [
        f"b{md}#s2 (no such anchor)",
        f"c{md} (no such file)",
        f"b{md}#nope (no such anchor)",
    ]


def inline_commands(markdown: str) -> list[list[str]]:
    """The commands in a Markdown text's inline code spans (outside fenced blocks, a span may wrap
    a line) that start with ``deepboot`` or ``python train_policy.py`` and give flags."""
    prose = _without_fences(markdown).replace("\n", " ")
    spans = re.findall(r"`([^`]+)`", prose)
    return [
        shlex.split(span)
        for span in spans
        if re.match(r"(deepboot|python train_policy\.py) ", span) and re.search(r" --?\w", span)
    ]


def project_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]] | None:
    """The project's real parser of a command line and the arguments it parses, or None when the
    command is not the project's (pip, tensorboard, the Zoo)."""
    from deepboot_harness.cli import build_parser as deepboot_parser
    from train_policy import build_parser as train_parser

    program, args = Path(argv[0]).name, argv[1:]
    if program.startswith("python") and args[:1] == ["train_policy.py"]:
        return train_parser(), args[1:]
    if program.startswith("python") and args[:2] == ["-m", "train_policy"]:
        return train_parser(), args[2:]
    if program == "deepboot" and args[:1] == ["train"]:
        return train_parser("deepboot train"), args[1:]
    if program == "deepboot":
        return deepboot_parser(), args
    return None


def test_readme_commands_use_only_flags_the_parsers_accept(capsys: pytest.CaptureFixture[str]) -> None:
    """Every ``deepboot ...`` and ``train_policy.py ...`` command of the README (its fenced bash
    blocks and the commands quoted in its text) parses with the real parsers (nothing runs), and
    every ``--preset`` it names exists."""
    from agents.runs.run_config import preset_descriptions

    presets = set(preset_descriptions())
    checked, bad = 0, []
    text = README.read_text(encoding="utf-8")
    for argv in shell_commands(text) + inline_commands(text):
        found = project_parser(argv)
        if found is None:
            continue
        parser, args = found
        checked += 1
        try:
            parsed = parser.parse_args(args)
        except SystemExit:
            bad.append(f"{shlex.join(argv)}\n    {capsys.readouterr().err.strip()}")
            continue
        if getattr(parsed, "preset", None) not in (None, *presets):
            bad.append(f"{shlex.join(argv)}\n    unknown preset {parsed.preset!r}")
    assert not bad, "README commands the parsers refuse:\n" + "\n".join(bad)
    assert checked >= 6, f"only {checked} project commands found in README.md's bash blocks"


def test_the_command_check_refuses_unknown_flags() -> None:
    argv = shell_commands("```bash\nx && deepboot compare --workloads test --polices ats --out r  # typo\n```\n")
    assert argv == [["x"], ["deepboot", "compare", "--workloads", "test", "--polices", "ats", "--out", "r"]]
    found = project_parser(argv[1])
    assert found is not None
    with pytest.raises(SystemExit):
        found[0].parse_args(found[1])
    assert project_parser(["tensorboard", "--logdir", "runs"]) is None
    prose = "Run `deepboot simulate --workload W\n--policy P`, or `deepboot compare` alone.\n"
    assert inline_commands(prose) == [["deepboot", "simulate", "--workload", "W", "--policy", "P"]]


def test_readme_python_snippets_run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python runs as written (the SB3 snippet where the rl extra is installed), and a
    number the environment snippet prints is the one its comment states."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    blocks = [body for language, body in FENCE.findall(README.read_text(encoding="utf-8")) if language == "python"]
    assert blocks, "README.md has no python block"
    for code in blocks:
        needs_rl = "sb3_contrib" in code or "load_agent" in code
        if needs_rl and importlib.util.find_spec("sb3_contrib") is None:
            continue
        exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})  # noqa: S102 - the README's own code
        printed = capsys.readouterr().out.split()
        for value in printed:
            assert value in code, f"the README's snippet prints {value}, which its text does not state"


WORK_COUNTER = re.compile(r"\b[Ss]essions?[ -]?\d+|\(s\d+\)")
"""An internal work counter ("session 34", "(s47)"): a user cannot place it; results are dated by
commit or calendar date instead (issue 68)."""


def test_user_docs_date_results_by_commit_or_date() -> None:
    pages = [REPO / "README.md", REPO / "agents" / "pretrained" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = [
        f"{page.relative_to(REPO)}:{lineno}: {match.group(0)}"
        for page in pages
        for lineno, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in WORK_COUNTER.finditer(line)
    ]
    assert not found, "date results by commit or date:\n" + "\n".join(found)
    assert WORK_COUNTER.search("measured in session 34") and not WORK_COUNTER.search("a dropped SSH session")


def test_results_page_shows_what_is_current() -> None:
    """docs/results.md holds what is measured now (the record in the order it was made is docs/history.md)."""
    assert len((REPO / "docs" / "results.md").read_text(encoding="utf-8").splitlines()) <= 700
