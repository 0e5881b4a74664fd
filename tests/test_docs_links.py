"""The documentation stays true: every relative link of README.md and docs/*.md reaches an existing file (and,
for a link into a Markdown file with ``#anchor``, an existing heading), and the runnable code blocks run.

A runnable block is a fenced block whose info string is ``python run``. The runnable blocks of one file run in
order in one namespace, from the repository root, with no installed plugin loaded and no debug variable set. A
runnable block followed directly by a ``text output`` block must print exactly that text.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(`{3,})([^\n`]*)\n(.*?)^\1[ \t]*$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
DEBUG_VARIABLES = ("SNIPPETS_DUMP_LIR", "SNIPPETS_PERF_COUNT", "SNIPPETS_SEGFAULT_DETECTOR")


@dataclass(frozen=True)
class Block:
    info: str
    body: str
    line: int
    start: int
    end: int


def blocks(text: str) -> list[Block]:
    return [
        Block(m.group(2).strip(), m.group(3), text.count("\n", 0, m.start()) + 1, m.start(), m.end())
        for m in FENCE.finditer(text)
    ]


def prose(text: str) -> str:
    """The text without fenced blocks and inline code, where links are not links."""
    text = FENCE.sub("", text)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: links and code marks dropped, lower case, punctuation removed, spaces to '-'."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    heading = re.sub(r"[^\w\- ]", "", heading.lower())
    return heading.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(prose_keep_headings(path.read_text()))}


def prose_keep_headings(text: str) -> str:
    return FENCE.sub("", text)


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_docs_are_found() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "index.md", "architecture.md", "writing_a_target.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_existing_files(path: Path) -> None:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading with anchor #{anchor}")
    assert not broken, f"{path.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_the_link_checker_sees_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n\n[ok](page.md#top) [bad](missing.md) [bad anchor](#nowhere) [web](https://example.com)\n"
        "`[in code](nope.md)`\n\n```python\n[in a block](nope2.md)\n```\n"
    )
    assert relative_links(page) == ["page.md#top", "missing.md", "#nowhere"]
    assert anchors(page) == {"top"}
    assert slug("4. The hooks: passes and emitters per target") == "4-the-hooks-passes-and-emitters-per-target"
    assert slug("`Subgraph.generate` and [x](y)") == "subgraphgenerate-and-x"


RUNNABLE = [p for p in DOCS if any(b.info == "python run" for b in blocks(p.read_text()))]


def run_page(text: str, name: str) -> list[tuple[Block, str]]:
    """Run the runnable blocks of a page in order in one namespace; per block followed by a ``text output``
    block, that output block and what the runnable block printed."""
    found = blocks(text)
    namespace: dict[str, object] = {"__name__": f"doc_{Path(name).stem}"}
    printed = []
    for k, block in enumerate(found):
        if block.info != "python run":
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.body, f"{name}:{block.line}", "exec"), namespace)  # noqa: S102 - the doc is the test
        following = found[k + 1] if k + 1 < len(found) else None
        if following is not None and following.info == "text output" and not text[block.end : following.start].strip():
            printed.append((following, out.getvalue()))
    return printed


@contextlib.contextmanager
def doc_environment() -> Iterator[None]:
    """From the repository root, no installed plugin, no debug variable; the plugin hosts forgotten after."""
    from snippets_core.plugins import reset_hosts

    saved = {k: os.environ.get(k) for k in ("SNIPPETS_DISABLE_PLUGIN_AUTOLOAD", *DEBUG_VARIABLES)}
    cwd = os.getcwd()
    os.environ["SNIPPETS_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for name in DEBUG_VARIABLES:
        os.environ.pop(name, None)
    os.chdir(ROOT)
    reset_hosts()
    try:
        yield
    finally:
        reset_hosts()
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_runnable_blocks_run(path: Path) -> None:
    name = str(path.relative_to(ROOT))
    with doc_environment():
        printed = run_page(path.read_text(), name)
    for output, got in printed:
        assert got.rstrip() == output.body.rstrip(), (
            f"{name}:{output.line}: the text output block differs from what the block before it prints "
            f"(`python tests/test_docs_links.py --update` rewrites it):\n{got}"
        )


def test_the_pages_with_code_have_runnable_blocks() -> None:
    """writing_a_target.md's example target and architecture.md's LinearIR dump are runnable, so checked here."""
    assert {"writing_a_target.md", "architecture.md"} <= {p.name for p in RUNNABLE}


def test_output_blocks_are_compared(tmp_path: Path) -> None:
    text = "```python run\nprint('a')\n```\n\n```text output\na\n```\n"
    found = blocks(text)
    assert [b.info for b in found] == ["python run", "text output"]
    assert not text[found[0].end : found[1].start].strip() and found[1].body == "a\n"


def update_outputs(path: Path) -> bool:
    """Rewrite the ``text output`` blocks of ``path`` with what their runnable blocks print; True if it changed."""
    text = path.read_text()
    with doc_environment():
        printed = run_page(text, str(path.relative_to(ROOT)))
    new = text
    for output, got in sorted(printed, key=lambda p: -p[0].start):  # from the end: earlier offsets stay valid
        fence = text[output.start :].split("\n", 1)[0]
        new = new[: output.start] + f"{fence}\n{got.rstrip()}\n```" + new[output.end :]
    if new != text:
        path.write_text(new)
    return new != text


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_docs_links.py --update   (rewrites the docs' text output blocks)")
    for page in RUNNABLE:
        print(f"{page.relative_to(ROOT)}: {'updated' if update_outputs(page) else 'unchanged'}")
