"""The documentation stands alone: every fact it and the code cite is in the repository's docs/,
every reference to docs/evidence.md names a section that exists, and every relative link of the
Markdown files points at a file of the checkout."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import ROOT

FACTS = ROOT / "docs" / "evidence.md"


def tracked_files():
    """The files git knows in this checkout (tracked, and untracked ones not ignored)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return sorted({name for name in out.split("\0") if name and (ROOT / name).is_file()})


TEXT_SUFFIXES = {".md", ".py", ".yml", ".yaml", ".sh", ".j2", ".cfg", ".ini", ".txt", ".toml", ""}


def text_files():
    for name in tracked_files():
        path = ROOT / name
        if path.suffix in TEXT_SUFFIXES and name != "LICENSE" and not path.is_symlink():
            try:
                yield name, path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue


def facts_sections():
    return {int(m.group(1)) for m in re.finditer(r"^## (\d+)\. ", FACTS.read_text(), re.M)}


def test_facts_page_exists_with_numbered_sections():
    assert FACTS.is_file()
    assert facts_sections() >= {1, 2, 3, 4, 5, 6}


# Documents outside the repository that earlier docs pointed at: a reader of the collection
# alone cannot open them.
OUTSIDE = re.compile(r"shared/docs|/work/shared|\.\./shared/(?:docs|facts|design|test-hosts|conventions)"
                     r"|shared (?:test-hosts|facts|design)\.md")


def test_no_file_points_outside_the_repository():
    offenders = [name for name, text in text_files()
                 if name != "tests/unit/test_docs.py" and OUTSIDE.search(text)]
    assert not offenders, "these files cite documents outside the repository: %s" % offenders


# "evidence.md section 2", "docs/evidence.md section 1", "evidence.md sections 1 and 4"
SECTION_REF = re.compile(r"evidence\.md,? sections? (\d+)(?:(?:,| and) (\d+))?")
BARE_FACTS = re.compile(r"(?<![\w/.-])evidence\.md")


def test_every_facts_reference_names_an_existing_section():
    sections = facts_sections()
    bad = []
    for name, text in text_files():
        for m in SECTION_REF.finditer(text):
            for number in filter(None, m.groups()):
                if int(number) not in sections:
                    bad.append("%s: %s" % (name, m.group(0)))
    assert not bad, "references to sections docs/evidence.md does not have: %s" % bad


def test_bare_facts_references_are_to_the_repository_page():
    """A bare `evidence.md` is only acceptable inside docs/ (where it is a sibling) or as a link."""
    bad = []
    for name, text in text_files():
        if name.startswith("docs/") or name == "tests/unit/test_docs.py":
            continue
        for line in text.splitlines():
            if BARE_FACTS.search(line) and "docs/evidence.md" not in line:
                bad.append("%s: %s" % (name, line.strip()))
    assert not bad, "write docs/evidence.md, so the reader knows where it is: %s" % bad


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("name", [n for n in tracked_files() if n.endswith(".md")])
def test_relative_links_resolve(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        if not (ROOT / name).parent.joinpath(target).exists():
            broken.append(target)
    assert not broken, "%s links to files that do not exist: %s" % (name, broken)
