"""`{% load cells %}`: console.cells' formatting for the dashboard's templates (`|words`, `|cut_name`).

Loaded by templates/console/_panels.html. Formatting only; reads nothing.
Tests: tests/console/test_console_layout.py::test_every_page_fits_1280_pixels_without_mid_word_wraps.
"""

# mypy: disallow-untyped-decorators=False

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from console import cells

register = template.Library()


@register.filter
def words(text: object) -> SafeString:
    """Free text that wraps only at its spaces (console.cells.words; escaped there)."""
    return mark_safe(cells.words(str(text or "")))  # noqa: S308  (format_html escaped every word)


@register.filter
def cut_name(text: object, width: int = cells.NAME_WIDTH) -> SafeString:
    """A long name cut in the middle, whole in its tooltip (console.cells.cut; escaped there)."""
    return mark_safe(cells.cut(str(text or ""), int(width)))  # noqa: S308
