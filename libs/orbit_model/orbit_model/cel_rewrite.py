"""Comprehension macros rewritten so each iteration is counted and ``map`` is linear.

The CEL library expands ``list.map(x, f)`` into a fold whose every step is
``result + [f]``: a new list, copying all it has so far, so mapping 15,000
elements copied 112 million (8 s). ``filter`` is the same fold. And no macro
counts its iterations, so nested ones multiply unseen.

:func:`metered` rewrites each macro call of an expression, before the library
compiles it, into the ``all`` macro (which folds a boolean, in constant time
a step) calling the budget's functions (:mod:`orbit_model.cel_budget`):

==========================  =========================================================
``T.map(x, f)``             ``C(B(id), T.all(x, P(id, w, f)))``
``T.map(x, p, f)``          ``C(B(id), T.all(x, (p) ? P(id, w, f) : K(w)))``
``T.filter(x, p)``          ``C(B(id), T.all(x, (p) ? P(id, w, x) : K(w)))``
``T.all(x, p)`` and the     ``T.all(x, K(w) && (p))``
other boolean macros
==========================  =========================================================

``B`` opens a list for the call, ``P`` appends to it, ``C`` closes and returns it, and
``K`` counts an iteration. Each iteration costs ``w``: one more than the tokens of the
macro's body. The iteration variable, the order and the errors are the macro's own.

The rewriting reads tokens, not a syntax tree: it needs only the postfix chain
before each ``.macro(`` (``input.items``, ``lists.range(3)``, ``(a + b)``) and the
macro's arguments, split at their top-level commas. A source is parsed by the
library first, so only sources CEL accepts get here.
"""

from __future__ import annotations

from orbit_model.cel_tokens import Token, tokens

RESERVED_PREFIX = "__orbit"
"""Names of the budget's functions start with it; an expression may not name them."""
BEGIN = "__orbit_begin"
PUSH = "__orbit_push"
COLLECT = "__orbit_collect"
TICK = "__orbit_tick"

_MACROS = {"map": (2, 3), "filter": (2,), "all": (2,), "exists": (2,)}
_MACROS |= {"exists_one": (2,), "existsOne": (2,)}
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


def metered(source: str) -> str | None:
    """``source`` with every comprehension macro rewritten as the module says; None
    if it calls none.

    Raises:
        ValueError: ``source`` is not CEL (its brackets do not pair).
    """
    rewriter = _Rewriter(tokens(source))
    text = rewriter.rewrite()
    return text if rewriter.macros else None


class _Rewriter:
    def __init__(self, items: list[Token]) -> None:
        self.tokens = items
        self.position = 0
        self.calls = 0
        """``map`` and ``filter`` calls, numbered from 1."""
        self.macros = 0

    def rewrite(self) -> str:
        text = self._expression()
        if self.position != len(self.tokens):  # not CEL: the library refused it already
            raise ValueError(f"unexpected {self.tokens[self.position].text!r}")
        return text

    def _peek(self, offset: int = 0) -> Token | None:
        index = self.position + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def _expression(self) -> str:
        """Tokens up to a closing bracket or a comma of the enclosing level."""
        text = ""
        operator = False
        while (token := self._peek()) is not None and token.text not in (")", "]", "}", ","):
            if token.kind == "punct" and token.text not in _CLOSERS:
                # an operator, ``?``, ``:``, a leading ``.``: one character a token, so
                # ``==`` is two, written together again
                text += token.text if operator else f" {token.text}"
                operator = True
                self.position += 1
            elif token.text == "in":
                text += " in"
                operator = False
                self.position += 1
            else:
                text += f" {self._chain()}"
                operator = False
        return text.strip()

    def _chain(self) -> str:
        """A primary and its postfix: selections, calls, indexes."""
        first = self.tokens[self.position]
        if first.text in _CLOSERS:
            text = self._group()
        else:
            self.position += 1
            text = first.text
            following = self._peek()
            if first.kind == "ident" and following is not None and following.text in ("(", "{"):
                text += self._group()  # a global call, or a message literal
        while (token := self._peek()) is not None:
            if token.text == "[":
                text += self._group()
            elif token.text == "." and (name := self._peek(1)) is not None:
                self.position += 2
                if name.text == "?":  # an optional selection: .?field
                    text += ".?" + self.tokens[self.position].text
                    self.position += 1
                    continue
                text = self._member(text, name.text)
            else:
                break
        return text

    def _member(self, target: str, name: str) -> str:
        following = self._peek()
        if following is None or following.text != "(":
            return f"{target}.{name}"
        start = self.position
        arguments = self._arguments()
        arities = _MACROS.get(name, ())
        body = self.tokens[start + 1 : self.position - 1]
        if len(arguments) in arities and _is_name(arguments[0]):
            return self._macro(target, name, arguments, weight=1 + len(body))
        return f"{target}.{name}({', '.join(arguments)})"

    def _macro(self, target: str, name: str, arguments: list[str], weight: int) -> str:
        variable, *rest = arguments
        self.macros += 1
        if name not in ("map", "filter"):
            (predicate,) = rest
            return f"{target}.{name}({variable}, {TICK}({weight}) && ({predicate}))"
        self.calls += 1
        call = self.calls
        if name == "filter":
            (predicate,) = rest
            step = f"({predicate}) ? {PUSH}({call}, {weight}, {variable}) : {TICK}({weight})"
        elif len(rest) == 1:
            step = f"{PUSH}({call}, {weight}, {rest[0]})"
        else:
            predicate, value = rest
            step = f"({predicate}) ? {PUSH}({call}, {weight}, {value}) : {TICK}({weight})"
        return f"{COLLECT}({BEGIN}({call}), {target}.all({variable}, {step}))"

    def _group(self) -> str:
        """A bracketed group, rewritten inside: ``( … )``, ``[ … ]``, ``{ … }``."""
        opener = self.tokens[self.position].text
        return opener + ", ".join(self._arguments()) + _CLOSERS[opener]

    def _arguments(self) -> list[str]:
        """The comma-separated expressions of a bracketed group, its brackets consumed."""
        closer = _CLOSERS[self.tokens[self.position].text]
        self.position += 1
        arguments: list[str] = []
        while (token := self._peek()) is not None and token.text != closer:
            if token.text == ",":
                self.position += 1
                continue
            arguments.append(self._expression())
        if token is None:
            raise ValueError(f"{closer!r} is missing")
        self.position += 1
        return arguments


def _is_name(text: str) -> bool:
    return text.isidentifier()
