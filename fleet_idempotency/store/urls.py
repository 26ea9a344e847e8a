"""Store URLs as they may be shown to a person."""

from __future__ import annotations


def redacted_url(url: str) -> str:
    """``url`` without its password, for logs and output."""
    scheme, _, rest = url.partition("://")
    credentials, at, place = rest.rpartition("@")
    return f"{scheme}://{credentials.partition(':')[0]}{at}{place}" if at else url
