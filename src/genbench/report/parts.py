"""The HTML pieces the report's sections share: a card's headline tiles, a table."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from html import escape


def tiles_html(items: Iterable[tuple[str, str, str]]) -> str:
    """Headline tiles, (label, value, detail) each as plain text."""
    return "".join(
        f'<div class="tile"><div class="k">{escape(k)}</div><div class="v">{escape(v)}</div>'
        f'<div class="d">{escape(d)}</div></div>'
        for k, v, d in items
    )


def table_of(head: list[str], rows: list[list[str]], text: Collection[int]) -> str:
    """A table whose columns in `text` are left-aligned text, the others numbers (right);
    the head and the cells are HTML already."""

    def cell(tag: str, i: int, c: str) -> str:
        return f"<{tag} class='t'>{c}</{tag}>" if i in text else f"<{tag}>{c}</{tag}>"

    th = "".join(cell("th", i, h) for i, h in enumerate(head))
    body = "".join(
        "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in rows
    )
    return f'<div class="tablewrap"><table><tr>{th}</tr>{body}</table></div>'
