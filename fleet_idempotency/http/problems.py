"""RFC 9457 problem details: every error of the HTTP API is ``application/problem+json``.

A problem's ``type`` is a relative URI (``/problems/<slug>``) that this server also serves
as a short text, so a client can look up what a problem means and how to react.
Bodies are encoded deterministically (sorted keys, no whitespace): a replayed answer must
be byte-for-byte the first one.
"""

from __future__ import annotations

import json
from typing import Any

PROBLEM_MEDIA_TYPE = "application/problem+json"

# slug -> (title, what the client should do)
PROBLEM_TYPES: dict[str, tuple[str, str]] = {
    "invalid-request": (
        "Invalid request",
        "Fix the named field and send again; nothing was stored.",
    ),
    "missing-idempotency-key": (
        "Idempotency-Key header required",
        "Send a client-generated key (UUID or ULID) in the Idempotency-Key header.",
    ),
    "unsupported-media-type": (
        "Unsupported media type",
        "Send the body as application/json.",
    ),
    "payload-too-large": (
        "Request body too large",
        "Send a smaller body; the limit is in the detail.",
    ),
    "unauthorized": (
        "Missing or unknown API key",
        "Send Authorization: Bearer <api key>.",
    ),
    "unknown-robot": ("Unknown robot", "Use a robot id listed by GET /v1/robots."),
    "unknown-key": (
        "Unknown idempotency key",
        "Never seen, released after a refusal, or forgotten after its tombstone expired.",
    ),
    "in-progress": (
        "Command still in progress",
        "Do not resend work: wait, then poll the status endpoint (Location).",
    ),
    "key-reused": (
        "Idempotency key reused for another command",
        "Use a new key for a new command; the stored command is untouched.",
    ),
    "key-expired": (
        "Idempotency key expired",
        "The key is past retention; read its tombstone at the status endpoint (Location).",
    ),
    "busy": ("Too many requests", "Retry after the number of seconds in Retry-After."),
    "store-full": (
        "Key store full",
        "The fleet refuses new keys until its store has room; retry later.",
    ),
    "store-unavailable": (
        "Key store unavailable",
        "The fleet's database cannot be reached; nothing was accepted. Retry later.",
    ),
    "command-refused": (
        "Command refused by the robot",
        "The robot refused before acting and the key was released: fix and resend.",
    ),
    "command-withdrawn": (
        "Command withdrawn by its client",
        "An ExecuteCommand goal of this key was canceled before the command was sent; "
        "nothing ran and the key was released: resend to run it.",
    ),
    "command-failed": (
        "Command failed after execution began",
        "Final and cached: it will not be re-run. Reconcile with the status endpoint.",
    ),
    "command-interrupted": (
        "Command interrupted",
        "Its outcome is unknown (its executor died, or the robot lost it); final, needs "
        "reconciliation by an operator.",
    ),
    "orchestrator-unavailable": (
        "Orchestrator unavailable",
        "The orchestrator did not answer (restarting?); retry with the same key.",
    ),
    "not-found": ("Not found", "See /docs for the API's paths."),
    "bad-gateway": ("Unexpected answer from the fleet", "Report this; retry with the same key."),
}


def encode_json(document: Any) -> bytes:
    """The one JSON encoding of every body: deterministic, so replays are byte-identical."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Problem(Exception):
    """An error answer; raised anywhere in a request, rendered by the app's handler."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        *,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(f"{status} {slug}: {detail}")
        if slug not in PROBLEM_TYPES:
            raise ValueError(f"unknown problem type {slug!r}")
        self.status = status
        self.slug = slug
        self.detail = detail
        self.headers = dict(headers or {})
        self.extensions = extensions

    def document(self) -> dict[str, Any]:
        title, _hint = PROBLEM_TYPES[self.slug]
        return {
            **self.extensions,
            "type": f"/problems/{self.slug}",
            "title": title,
            "status": self.status,
            "detail": self.detail,
        }

    def body(self) -> bytes:
        return encode_json(self.document())
