"""CEL source as tokens: what the static analysis and the rewriting of macros read.

The CEL library parses, but shows no syntax tree; these tokens are enough to
find the names an expression reads and the comprehension macros it calls.
Whitespace and comments are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
    | (?P<string>
        # raw (r, rb, br): a backslash is just a character
        (?:[rR][bB]?|[bB][rR])
        (?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|"[^"\n]*"|'[^'\n]*')
        # otherwise a backslash escapes the next character
      | [bB]?
        (?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
          |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>0[xX][0-9a-fA-F]+[uU]?|[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[uU]?)
    | (?P<punct>\S)
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    """One token: its kind (``string``, ``ident``, ``number``, ``punct``) and text."""

    kind: str
    text: str


def tokens(source: str) -> list[Token]:
    """The tokens of ``source``, without whitespace and comments."""
    return [
        Token(match.lastgroup or "punct", match.group())
        for match in _TOKEN.finditer(source)
        if match.lastgroup != "space"
    ]


def string_value(literal: str) -> str:
    """The text inside a string literal (escapes left as written)."""
    body = literal.lstrip("rRbB")
    quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
    return body[len(quote) : len(body) - len(quote)]
