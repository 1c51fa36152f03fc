"""The documentation: the MkDocs site builds in strict mode (a broken link or cross-reference
fails it), every theory section the code cites exists, and every file the code cites is in the
repository."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THEORY = ROOT / "docs" / "theory"
SOURCES = sorted((ROOT / "ibflow").rglob("*.py"))

# `[THEORY §2.8][theory-2-8]`: link text may wrap onto the next line (and a comment's "# ").
THEORY_LINK = re.compile(r"\[[^\[\]]*\]\[(theory-[\w-]+)\]")
# Plain-text citations (CLI help, error messages, figure titles): "docs/theory §2.8".
PLAIN_CITATION = re.compile(r"docs/theory §(\d+(?:\.\d+)?)")
# Repository paths cited in docstrings and comments.
CITED_PATH = re.compile(
    r"(?<![\w/.])((?:[\w.-]+/)*[\w-]+\.(?:md|py|txt|toml|json|csv))(?![\w/])")


def _anchors() -> set[str]:
    found = set()
    for page in THEORY.glob("*.md"):
        found.update(re.findall(r"#(theory-[\w-]+)", page.read_text()))
    return found


def test_mkdocs_build_is_strict_clean(tmp_path):
    """``mkdocs build --strict``: an unresolved cross-reference (a docstring's
    ``[THEORY §x][theory-x]`` among them), a broken link or a missing included results file
    aborts the build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "theory" / "azulay" / "index.html").exists()


def test_strict_build_fails_on_a_broken_cross_reference(tmp_path):
    """The check above can fail: the same configuration on a copy of the docs with one
    reference to a missing theory anchor aborts."""
    import shutil

    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "docs" / "index.md").write_text("# x\n\nSee [§9.9][theory-9-9].\n")
    config = (ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", "docs_dir: " + str(
        tmp_path / "docs"))
    # No API pages and no snippets from the repository in this copy: only the link check.
    config = re.sub(r"  - API reference:\n(?:      - .*\n)+", "", config)
    config = re.sub(r"  - Benchmarks: benchmarks.md\n", "", config)
    shutil.rmtree(tmp_path / "docs" / "api")
    (tmp_path / "docs" / "benchmarks.md").unlink()
    (tmp_path / "mkdocs.yml").write_text(config)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
         str(tmp_path / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode != 0
    assert "theory-9-9" in result.stdout + result.stderr


def test_every_cited_theory_anchor_exists():
    """Comments are not rendered by mkdocstrings, so the build alone does not check them."""
    anchors = _anchors()
    assert {"theory-2-8", "theory-az-t1"} <= anchors
    missing = []
    for path in SOURCES:
        text = path.read_text()
        for ident in THEORY_LINK.findall(text):
            if ident not in anchors:
                missing.append(f"{path.relative_to(ROOT)}: {ident}")
        for section in PLAIN_CITATION.findall(text):
            if "theory-" + section.replace(".", "-") not in anchors:
                missing.append(f"{path.relative_to(ROOT)}: docs/theory §{section}")
    assert not missing, missing


def test_no_citation_of_a_document_the_repository_lacks():
    for path in SOURCES:
        text = path.read_text()
        for name in ("THEORY.md", "STYLE.md"):
            assert name not in text, f"{path.relative_to(ROOT)} cites {name}"
        # "THEORY" only as the text of a resolving link, never as a bare document name
        bare = re.sub(r"\[THEORY[^\[\]]*\]\[theory-[\w-]+\]", "", text)
        assert "THEORY" not in bare, f"{path.relative_to(ROOT)}: bare THEORY citation"


def test_every_cited_file_exists():
    """A path such as ``tests/test_kinks.py`` or ``benchmarks/results/kinks.md`` in a docstring
    or comment names a file of the repository (relative to the root, to the citing file's
    directory, or to the package); bare ``*.json``/``*.csv`` names are outputs, not citations."""
    missing = []
    for path in SOURCES:
        for cited in CITED_PATH.findall(path.read_text()):
            if "/" not in cited and cited.endswith((".json", ".csv")):
                continue  # a file the code writes (``summary.json``), not one it cites
            if "/" not in cited and cited.count(".") == 1 and cited.split(".")[0].isidentifier():
                candidates = [path.parent / cited, ROOT / cited,
                              *(ROOT / "ibflow").rglob(cited)]
            else:
                candidates = [ROOT / cited, path.parent / cited, ROOT / "ibflow" / cited]
            if not any(c.exists() for c in candidates):
                missing.append(f"{path.relative_to(ROOT)}: {cited}")
    assert not missing, missing


@pytest.mark.parametrize("section", ["2.3", "2.8", "8.2"])
def test_theory_pages_keep_section_numbers(section):
    anchor = "theory-" + section.replace(".", "-")
    pages = "".join(p.read_text() for p in THEORY.glob("*.md"))
    assert re.search(rf"^#+ {re.escape(section)} .*\{{ #{anchor} \}}$", pages, re.M)
