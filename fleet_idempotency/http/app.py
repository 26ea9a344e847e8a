"""The HTTP Unified Control API (FastAPI): ``create_app`` builds it around a FleetGateway.

Follows draft-ietf-httpapi-idempotency-key-header: a POST carries ``Idempotency-Key``;
a repeat of a finished key gets the stored answer again with ``Idempotent-Replayed:
true``, a repeat while in progress ``409``, a reuse for another command ``422``. The
caller's scope is its client id, from its API key (``auth.py``). All errors are RFC 9457
problem details (``problems.py``). OpenAPI at ``/docs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import StreamingResponse

from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.store import InvalidRequest, canonical_json, validate_key
from fleet_idempotency.store.fingerprint import MAX_JSON_DEPTH, fingerprint_of, parse_json

from .answers import (
    HttpAnswer,
    command_location,
    status_document,
    submit_answer,
)
from .auth import ApiKeys, Caller
from .gateway import FleetGateway, SubmitCall, SubmitReply, Unavailable
from .metrics import HttpMetrics, outcome_of
from .problems import PROBLEM_MEDIA_TYPE, PROBLEM_TYPES, Problem, encode_json
from .view import FleetView

STATIC = resources.files("fleet_idempotency.http") / "static"


class HttpSettings(BaseModel):
    """Limits and timing of the HTTP API (node parameters of the same names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_body_bytes: int = Field(default=16_384, ge=256)
    max_in_flight_per_client: int = Field(default=32, ge=1)
    max_wait_s: float = Field(default=60.0, ge=0)
    # How long the orchestrator may take to answer beyond the wait the caller asked for;
    # past it the caller gets 503 and retries (safe: same key).
    answer_timeout_s: float = Field(default=5.0, gt=0)
    retry_after_s: int = Field(default=1, ge=1)
    sse_keepalive_s: float = Field(default=15.0, gt=0)


class SubmitBody(BaseModel):
    """Body of ``POST /v1/robots/{robot_id}/commands``. Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    command_type: str = Field(min_length=1, max_length=64)
    payload: dict[str, Any] = Field(default_factory=dict)
    wait_timeout_sec: float = Field(default=0.0, ge=0)


def _parse_key(header: str | None) -> str:
    if header is None:
        raise Problem(
            400,
            "missing-idempotency-key",
            "this endpoint needs an Idempotency-Key header",
            field="Idempotency-Key",
        )
    # The draft writes the key as a structured-field string ("..."); Stripe's clients send
    # it bare. Both name the same key.
    key = header[1:-1] if len(header) >= 2 and header[0] == header[-1] == '"' else header
    try:
        return validate_key(key)
    except InvalidRequest as invalid:
        raise Problem(
            400,
            "invalid-request",
            f"Idempotency-Key: {str(invalid).removeprefix('invalid key: ')}",
            field="Idempotency-Key",
        ) from None


def _validation_problem(error: ValidationError) -> Problem:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "body"
    return Problem(400, "invalid-request", f"{field}: {first['msg']}", field=field)


def _problem_response(problem: Problem) -> Response:
    return Response(
        problem.body(), problem.status, headers=problem.headers, media_type=PROBLEM_MEDIA_TYPE
    )


def _answer_response(answer: HttpAnswer) -> Response:
    return Response(
        answer.body, answer.status, headers=answer.headers, media_type=answer.media_type
    )


class ClientSlots:
    """At most ``limit`` submits answered at once per client: the rest get 429."""

    def __init__(self, limit: int, metrics: HttpMetrics, retry_after_s: int) -> None:
        self._limit = limit
        self._metrics = metrics
        self._retry_after_s = retry_after_s
        self._in_flight: Counter[str] = Counter()

    def acquire(self, client_id: str) -> None:
        # One event loop thread: no lock needed between the check and the increment.
        if self._in_flight[client_id] >= self._limit:
            raise Problem(
                429,
                "busy",
                f"client {client_id!r} already has {self._limit} submits in flight",
                headers={"Retry-After": str(self._retry_after_s)},
            )
        self._in_flight[client_id] += 1
        self._metrics.requests_in_flight.labels(client_id).set(self._in_flight[client_id])

    def release(self, client_id: str) -> None:
        self._in_flight[client_id] -= 1
        self._metrics.requests_in_flight.labels(client_id).set(self._in_flight[client_id])


@dataclass
class Api:
    """What every route needs."""

    gateway: FleetGateway
    view: FleetView
    metrics: HttpMetrics
    api_keys: ApiKeys
    world: WorldConfig
    settings: HttpSettings
    slots: ClientSlots

    def authenticate(self, authorization: str | None) -> Caller:
        caller = self.api_keys.caller_for(authorization)
        if caller is None:
            raise Problem(
                401,
                "unauthorized",
                "send a configured API key as Authorization: Bearer <key>",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return caller

    def unavailable(self, error: Unavailable) -> Problem:
        return Problem(
            503,
            "orchestrator-unavailable",
            str(error),
            headers={"Retry-After": str(self.settings.retry_after_s)},
        )


def create_app(
    *,
    gateway: FleetGateway,
    view: FleetView,
    metrics: HttpMetrics,
    api_keys: ApiKeys,
    world: WorldConfig,
    settings: HttpSettings | None = None,
) -> FastAPI:
    settings = settings or HttpSettings()
    api = Api(
        gateway,
        view,
        metrics,
        api_keys,
        world,
        settings,
        ClientSlots(settings.max_in_flight_per_client, metrics, settings.retry_after_s),
    )
    app = FastAPI(
        title="fleet_idempotency Unified Control API",
        version="1",
        description="Submit robot commands safely retried with the Idempotency-Key header.",
    )
    _error_handlers(app)
    _command_routes(app, api)
    _fleet_routes(app, api)
    _page_routes(app, api)
    return app


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _on_problem(_request: Request, problem: Problem) -> Response:
        return _problem_response(problem)

    @app.exception_handler(RequestValidationError)
    async def _on_invalid(_request: Request, error: RequestValidationError) -> Response:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"][1:]) or "request"
        return _problem_response(
            Problem(400, "invalid-request", f"{field}: {first['msg']}", field=field)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _on_http_error(_request: Request, error: StarletteHTTPException) -> Response:
        slug = "not-found" if error.status_code == 404 else "invalid-request"
        return _problem_response(Problem(error.status_code, slug, str(error.detail)))


SUBMIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "final result (fresh within the wait, or replayed)"},
    400: {"description": "missing/malformed key, invalid body or command"},
    401: {"description": "missing or unknown API key"},
    404: {"description": "unknown robot"},
    409: {"description": "same key still in progress"},
    410: {"description": "key expired (tombstone): use the status endpoint"},
    413: {"description": "body too large"},
    415: {"description": "body is not application/json"},
    422: {"description": "same key, different command (both fingerprints named)"},
    429: {"description": "robot queue or client concurrency full: Retry-After"},
    500: {"description": "final: failed or interrupted after execution began"},
    503: {"description": "orchestrator did not answer: Retry-After"},
    507: {"description": "key store full: Retry-After"},
}


def _command_routes(app: FastAPI, api: Api) -> None:
    @app.post(
        "/v1/robots/{robot_id}/commands",
        summary="Submit a command under an idempotency key",
        status_code=202,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": SubmitBody.model_json_schema()}},
            }
        },
        responses=SUBMIT_RESPONSES,
    )
    async def submit_command(
        robot_id: str,
        request: Request,
        idempotency_key: Annotated[str | None, Header()] = None,
        authorization: Annotated[str | None, Header()] = None,
    ) -> Response:
        caller = api.authenticate(authorization)
        if robot_id not in api.view.robot_ids():
            raise Problem(
                404,
                "unknown-robot",
                f"robot_id: no robot {robot_id!r} in the fleet",
                field="robot_id",
            )
        key = _parse_key(idempotency_key)
        call, fingerprint = _submit_call(
            caller,
            key,
            robot_id,
            await _read_json_body(request, api.settings.max_body_bytes),
            api.settings,
        )
        api.slots.acquire(caller.client_id)
        started = time.monotonic()
        try:
            reply = await api.gateway.submit(call)
        except Unavailable as error:
            api.metrics.submits.labels("unavailable").inc()
            raise api.unavailable(error) from None
        finally:
            api.slots.release(caller.client_id)
        api.metrics.submits.labels(outcome_of(reply.status_code, reply.replayed)).inc()
        _time_new_submit(api.metrics, call, reply, started)
        fleet_ms = (time.monotonic() - started) * 1e3
        if reply.status_code == 422:
            raise await _mismatch(api.gateway, call, fingerprint, reply.message)
        answer = submit_answer(
            reply,
            key=key,
            robot_id=robot_id,
            command_type=call.command_type,
            fingerprint=fingerprint,
            retry_after_s=api.settings.retry_after_s,
        )
        response = _answer_response(answer)
        # How long the fleet (the SubmitCommand call) took of this answer (W3C Server-Timing).
        response.headers["Server-Timing"] = f"fleet;dur={fleet_ms:.1f}"
        return response

    @app.get("/v1/commands/{key:path}", summary="Status check of a key (reconciliation)")
    async def get_command(
        key: str, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        caller = api.authenticate(authorization)
        try:
            validate_key(key)
        except InvalidRequest as invalid:
            raise Problem(400, "invalid-request", str(invalid), field="key") from None
        try:
            report = await api.gateway.check(caller.client_id, key)
        except Unavailable as error:
            raise api.unavailable(error) from None
        if not report.found and report.state == 0:
            if report.status_code == 400:
                raise Problem(400, "invalid-request", report.message, field="key")
            raise Problem(404, "unknown-key", report.message or f"key {key!r} is unknown")
        return Response(encode_json(status_document(key, report)), media_type="application/json")


def _submit_call(
    caller: Caller, key: str, robot_id: str, body: Any, settings: HttpSettings
) -> tuple[SubmitCall, str]:
    """The SubmitCommand request for a validated body, and the body's fingerprint."""
    try:
        submit = SubmitBody.model_validate(body)
    except ValidationError as error:
        raise _validation_problem(error) from None
    if submit.wait_timeout_sec > settings.max_wait_s:
        raise Problem(
            400,
            "invalid-request",
            f"wait_timeout_sec: at most {settings.max_wait_s:g} s",
            field="wait_timeout_sec",
        )
    try:
        payload_json = canonical_json(submit.payload)
    except ValueError as error:
        raise Problem(400, "invalid-request", f"payload: {error}", field="payload") from None
    call = SubmitCall(
        client_id=caller.client_id,
        key=key,
        robot_id=robot_id,
        command_type=submit.command_type,
        payload_json=payload_json,
        wait_timeout_s=submit.wait_timeout_sec,
    )
    return call, fingerprint_of(robot_id, submit.command_type, submit.payload)


def _fleet_routes(app: FastAPI, api: Api) -> None:
    @app.get("/v1/robots", summary="Robots: status, load, pose")
    async def get_robots(authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        return JSONResponse({"robots": api.view.robots(api.authenticate(authorization))})

    @app.get("/v1/events", summary="The fleet's event log (recent ring), paged by sequence")
    async def get_events(
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        authorization: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        events, oldest = api.view.events(api.authenticate(authorization), after, limit)
        return JSONResponse(
            {
                "events": events,
                "next_after": events[-1]["sequence"] if events else after,
                "oldest_held": oldest,
            }
        )

    @app.get("/v1/events/stream", summary="Live events as Server-Sent Events")
    async def stream_events(
        request: Request,
        after: Annotated[int, Query(ge=0)] = 0,
        last_event_id: Annotated[int | None, Header()] = None,
        authorization: Annotated[str | None, Header()] = None,
    ) -> StreamingResponse:
        caller = api.authenticate(authorization)
        cursor = last_event_id if last_event_id is not None else after
        return StreamingResponse(
            _event_stream(api, request, caller, cursor),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store"},
        )

    @app.get("/v1/world", summary="Warehouse map: geometry, and live pallets when simulated")
    async def get_world(authorization: Annotated[str | None, Header()] = None) -> JSONResponse:
        api.authenticate(authorization)
        state: dict[str, Any] | None
        try:
            _geometry, live = await api.gateway.world()
            state = {name: live.get(name) for name in ("slots", "carried", "docked")}
        except Unavailable:
            state = None  # no world simulator (real robots): the map without pallets
        return JSONResponse({"geometry": api.world.model_dump(), "state": state})

    @app.get("/metrics", summary="Prometheus metrics")
    async def get_metrics() -> Response:
        return Response(generate_latest(api.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def _event_stream(
    api: Api, request: Request, caller: Caller, cursor: int
) -> AsyncIterator[bytes]:
    waiter = api.view.subscribe()
    try:
        yield b": fleet events\n\n"
        while not await request.is_disconnected():
            waiter.clear()
            events, _oldest = api.view.events(caller, cursor, 1000)
            for event in events:
                cursor = event["sequence"]
                data = json.dumps(event, sort_keys=True)
                yield f"id: {cursor}\nevent: {event['event_type']}\ndata: {data}\n\n".encode()
            if not events:
                try:
                    await asyncio.wait_for(waiter.wait(), api.settings.sse_keepalive_s)
                except TimeoutError:
                    yield b": keep-alive\n\n"
    finally:
        api.view.unsubscribe(waiter)


def _page_routes(app: FastAPI, api: Api) -> None:
    @app.get("/healthz", summary="Liveness of the HTTP server")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok", "auth": api.api_keys.enabled})

    @app.get("/readyz", summary="Readiness: the orchestrator's services are matched")
    async def readyz() -> JSONResponse:
        if not api.gateway.ready():
            raise Problem(
                503,
                "orchestrator-unavailable",
                "the orchestrator's services are not matched (yet)",
                headers={"Retry-After": str(api.settings.retry_after_s)},
            )
        return JSONResponse({"status": "ready"})

    @app.get("/problems/{slug}", summary="What a problem type means", include_in_schema=False)
    async def problem_type(slug: str) -> PlainTextResponse:
        if slug not in PROBLEM_TYPES:
            raise Problem(404, "not-found", f"no problem type {slug!r}")
        title, hint = PROBLEM_TYPES[slug]
        return PlainTextResponse(f"{title}\n\n{hint}\n")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"), media_type="text/html")

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")


async def _read_json_body(request: Request, limit: int) -> Any:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise Problem(
            415,
            "unsupported-media-type",
            f"Content-Type: expected application/json, got {media_type or 'none'}",
            field="Content-Type",
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Problem(
            413, "payload-too-large", f"body of {declared} bytes exceeds {limit}", field="body"
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:  # chunked bodies declare no length: count as they come
            raise Problem(413, "payload-too-large", f"body exceeds {limit} bytes", field="body")
        chunks.append(chunk)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as error:
        raise Problem(
            400, "invalid-request", f"body: not valid JSON ({error})", field="body"
        ) from None
    try:
        # Bounded before decoding, like every other JSON the fleet takes in (a body
        # nested thousands deep made json.loads raise RecursionError: a bare 500). The
        # body wraps the payload in one more level than the payload may have.
        return parse_json("body", text, max_depth=MAX_JSON_DEPTH + 1)
    except InvalidRequest as error:
        raise Problem(400, "invalid-request", f"body: {error.reason}", field="body") from None


def _time_new_submit(metrics: HttpMetrics, call: SubmitCall, reply: SubmitReply, t0: float) -> None:
    if reply.replayed or reply.status_code not in (200, 202) or reply.state in (0, 6, 7):
        return
    if reply.status_code == 202:
        metrics.submit_started(call.client_id, call.key, t0)
    else:
        metrics.submit_to_final.observe(time.monotonic() - t0)


async def _mismatch(
    gateway: FleetGateway, call: SubmitCall, received: str, message: str
) -> Problem:
    """422 naming both fingerprints: the stored one comes from the status check."""
    stored: str | None = None
    with contextlib.suppress(Unavailable):
        stored = (await gateway.check(call.client_id, call.key)).payload_sha256 or None
    return Problem(
        422,
        "key-reused",
        message or "the key was already used for a different command",
        stored_fingerprint=stored,
        received_fingerprint=received,
        status_url=command_location(call.key),
    )
