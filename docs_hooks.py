"""MkDocs hook and griffe extension of the docs site (``mkdocs.yml``; needs the ``docs`` extra).

* Links that leave ``docs/`` are not errors. The pages of ``docs/`` are written for the
  repository as GitHub shows it, and a few link to files beside the folder (``../README.md``,
  ``../agents/pretrained/README.md``). MkDocs only knows the files of ``docs/``, so it reports such
  a link as "not found", and ``mkdocs build --strict`` would fail on it. :func:`on_config` logs
  those reports as INFO instead when the link's target exists in the repository outside ``docs/``.
  Every other report stays a warning: a link inside ``docs/`` to a page or anchor that does not
  exist, and a link outside ``docs/`` to a file that does not exist, still fail the strict build.
* Sphinx roles in docstrings become links. The docstrings cite code as ``:func:`name```,
  ``:class:`~module.Class``` and so on; :class:`SphinxMarkup` rewrites each role into an optional
  cross-reference of mkdocs-autorefs (a link where the target is in the API reference, plain code
  where it is not, never a warning), resolving a short name in the docstring's scope as Python
  would (the module's names and imports), and drops reST's ``::`` before a literal block.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import griffe

# --- links that leave docs/ --------------------------------------------------------------------

_NOT_FOUND = re.compile(
    r"^Doc file '(?P<page>[^']+)' contains a link '(?P<url>[^']+)', but the target( '[^']+')? is not found"
)


class OutsideDocsLinks(logging.Filter):
    """Lowers MkDocs' "not found" warning of a link to an existing file outside ``docs_dir`` to INFO."""

    def __init__(self, docs_dir: Path) -> None:
        super().__init__()
        self.docs_dir = docs_dir.resolve()

    def leaves_docs_to_existing_file(self, page: str, url: str) -> bool:
        """Whether ``url``, linked from the page ``page`` of ``docs_dir``, names a file that
        exists outside ``docs_dir``."""
        path = url.split("#", 1)[0].split("?", 1)[0]
        if not path:
            return False
        target = (self.docs_dir / page).parent.joinpath(path).resolve()
        return not target.is_relative_to(self.docs_dir) and target.is_file()

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record; lower the level of a link that leaves ``docs_dir`` to a real file."""
        if record.levelno == logging.WARNING:
            found = _NOT_FOUND.match(record.getMessage())
            if found and self.leaves_docs_to_existing_file(found["page"], found["url"]):
                record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_LOGGER = logging.getLogger("mkdocs.structure.pages")


def on_config(config: Any) -> None:
    """Install the filter on the logger of MkDocs' link validation (once, also under ``mkdocs serve``)."""
    # by name: `mkdocs serve` loads this file anew for each build, with a new class
    for old in [f for f in _LOGGER.filters if type(f).__name__ == OutsideDocsLinks.__name__]:
        _LOGGER.removeFilter(old)
    _LOGGER.addFilter(OutsideDocsLinks(Path(config["docs_dir"])))


# --- Sphinx markup in docstrings ----------------------------------------------------------------

_ROLE = re.compile(
    r":(?:py:)?(?:mod|func|class|meth|data|attr|exc|obj|const):"
    r"`(?:(?P<title>[^`<]+?)\s*<(?P<target>[\w.]+)>|(?P<tilde>~?)(?P<name>[\w.]+))`"
)
_LITERAL_MARK = re.compile(r"(?<=\S)::$", flags=re.MULTILINE)


def autoref(obj: griffe.Object, role: re.Match[str]) -> str:
    """The optional cross-reference of a role cited in ``obj``'s docstring, shown as Sphinx shows
    it (``~a.b.c``: ``c``; ``Title <a.b.c>``: ``Title``)."""
    name = role["target"] or role["name"]
    first, _, rest = name.partition(".")
    if rest and first in obj.modules_collection.members:
        # a dotted name starting at a loaded package is a full path (``deepboot_env.env.action``
        # from inside ``deepboot_env.env``, whose member ``deepboot_env`` is a submodule)
        path = name
    else:
        try:
            path = obj.resolve(first) + (f".{rest}" if rest else "")
        except griffe.NameResolutionError:
            path = name  # a full path already, or a name of no scope here
    if role["title"]:
        shown = " ".join(role["title"].split())
    else:
        shown = name.rsplit(".", 1)[-1] if role["tilde"] else name
    return f'<autoref identifier="{path}" optional>`{shown}`</autoref>'


class SphinxMarkup(griffe.Extension):
    """Rewrites ``:role:`target``` in every docstring into an optional autorefs cross-reference,
    and a paragraph's closing ``::`` (reST: a literal block follows) into ``:``."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s own docstring (the tree is complete: imports resolve)."""
        if obj.docstring is not None:
            text = _ROLE.sub(lambda role: autoref(obj, role), obj.docstring.value)
            obj.docstring.value = _LITERAL_MARK.sub(":", text)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite a top-level package's own docstring (no :meth:`on_object` for it)."""
        self.on_object(obj=pkg)
