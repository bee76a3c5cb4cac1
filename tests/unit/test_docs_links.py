"""Relative links in the docs resolve, and the architecture page stands alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")]
)
#: Pages linked before they land, written in the same issue by someone else;
#: drop an entry once its file exists.
PENDING: set[Path] = set()

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """Return ``text`` without code blocks and code spans, where links are not links."""
    return _CODE.sub("", _FENCE.sub("", text))


def _links(page: Path) -> list[str]:
    return _LINK.findall(_prose(page.read_text(encoding="utf-8")))


def _anchors(page: Path) -> set[str]:
    """Return the heading anchors GitHub gives ``page`` (duplicates get ``-1``...)."""
    seen: dict[str, int] = {}
    anchors = set()
    for title in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _relative(page: Path) -> list[tuple[Path, str]]:
    """Return (target file, anchor) of every link of ``page`` inside the repository."""
    found = []
    for link in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        found.append((target, anchor))
    return found


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = [
        str(target.relative_to(ROOT)) if target.is_relative_to(ROOT) else str(target)
        for target, _ in _relative(page)
        if not target.exists() and target not in PENDING
    ]
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_anchors_resolve(page: Path) -> None:
    broken = [
        f"{target.relative_to(ROOT)}#{anchor}"
        for target, anchor in _relative(page)
        if anchor
        and target.suffix == ".md"
        and target.exists()
        and anchor not in _anchors(target)
    ]
    assert not broken, f"{page.relative_to(ROOT)} links to missing headings: {broken}"


def test_links_stay_inside_the_repository() -> None:
    outside = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in DOCS
        for target, _ in _relative(page)
        if not target.is_relative_to(ROOT)
    ]
    assert not outside


def test_architecture_links_nothing_outside_the_repository() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert not re.findall(r"https?://", text)
