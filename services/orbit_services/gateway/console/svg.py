"""How the console's drawings are written: SVG elements as strings, every text escaped.

The step graph (:mod:`.graph`) and the timeline (:mod:`.timeline`) are drawn on
the server; both write their elements with :func:`tag` and their root with
:func:`drawing`, so both escape the user's data in the same one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape


def tag(name: str, attributes: Mapping[str, object], *children: str) -> str:
    """The element ``name`` with ``attributes`` (values escaped) around ``children``
    (already markup); self-closed without them."""
    attrs = "".join(f' {key}="{escape(str(value))}"' for key, value in attributes.items())
    if not children:
        return f"<{name}{attrs}/>"
    return f"<{name}{attrs}>{''.join(children)}</{name}>"


def title(text: str) -> str:
    """A ``<title>`` child: what a browser shows on hovering its parent."""
    return f"<title>{escape(text)}</title>"


def drawing(
    css_class: str,
    title_id: str,
    size: tuple[float, float],
    caption: str,
    *body: str,
    font_size: int,
    style: str | None = None,
) -> str:
    """The ``<svg>`` root: an image of ``size`` (width, height) whose accessible name is
    ``caption`` (a ``<title>`` with ``title_id``), holding ``body``."""
    width, height = size
    attributes: dict[str, object] = {
        "xmlns": "http://www.w3.org/2000/svg",
        "class": css_class,
        "role": "img",
        "aria-labelledby": title_id,
        "viewBox": f"0 0 {width} {height}",
        "width": width,
        "height": height,
    }
    if style is not None:
        attributes["style"] = style
    attributes |= {"font-family": "system-ui, sans-serif", "font-size": font_size}
    return tag("svg", attributes, f'<title id="{title_id}">{escape(caption)}</title>', *body)
