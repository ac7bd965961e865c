"""MkDocs hooks: splice files kept outside docs/ into the pages that name them.

A page holds

    <!-- include: bench/results/summary.md -->
    ...what a reader of the unbuilt page sees instead (a link to the file)...
    <!-- end include -->

and the built page has the file's text (a path relative to the repository) in place of the whole block, so the
site shows the current benchmark table and changelog without a second copy to keep in step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

_BLOCK = re.compile(r"<!-- include: (?P<path>[^ ]+) -->\n.*?<!-- end include -->\n?", re.DOTALL)


def on_page_markdown(markdown: str, *, config: Any, **_: Any) -> str:
    """Replace each include block by the file it names; a missing file fails the build."""
    root = Path(config.config_file_path).parent

    def splice(match: re.Match[str]) -> str:
        path = root / match["path"]
        if not path.is_file():
            raise PluginError(f"{match['path']}, included by a page, does not exist")
        text = path.read_text(encoding="utf-8")
        return text if text.endswith("\n") else text + "\n"

    return _BLOCK.sub(splice, markdown)
