"""Publisher-specific errors under their old home: they are defined in ``rabbitry.errors``; all
are ``PublishError`` so one ``except`` catches every failure."""

from __future__ import annotations

from rabbitry.errors import PublisherClosed

__all__ = ["PublisherClosed"]
