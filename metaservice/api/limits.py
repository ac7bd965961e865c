"""The request body layer, as pure ASGI middleware: a route runs only on a body that arrived whole, within the
size limit, and (when it is JSON) as well-formed UTF-8 JSON with unique keys.

The server hands a request to the app as soon as its headers are in; the body follows in messages. This layer
reads all of them first. A client that goes away before the last one (a chunked upload cut off, a malformed
chunk size the server answers with 400 itself, a Content-Length body cut short) ends the request here: nothing
runs, so nothing changes. A declared length over the limit is refused before reading anything.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metaservice.api.bodies import BodyProblem, check_json, is_json


class RequestBodies:
    """Answer 413 past `max_bytes` and 422 for bodies that are not UTF-8 JSON; never run the app on a partial body."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, send)
            return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # http.disconnect before the last body message: the body never arrived whole
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await self._too_large(scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        content_type = headers.get(b"content-type")
        media = content_type.decode("latin-1") if content_type is not None else None
        if body and is_json(media):
            try:
                check_json(body, media)
            except BodyProblem as problem:
                await self._invalid(scope, send, problem)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        await _send_problem(
            scope,
            send,
            status=413,
            code="payload_too_large",
            title="Request body too large",
            detail=f"request bodies are limited to {self.max_bytes} bytes",
            max_bytes=self.max_bytes,
        )

    async def _invalid(self, scope: Scope, send: Send, problem: BodyProblem) -> None:
        await _send_problem(
            scope,
            send,
            status=422,
            code="invalid_request",
            title="Invalid request",
            detail=f"invalid body: {problem.message}",
            errors=[{"loc": ["body"], "msg": problem.message, "type": problem.kind}],
        )


async def _send_problem(
    scope: Scope, send: Send, *, status: int, code: str, title: str, detail: str, **extra: Any
) -> None:
    """The same RFC 9457 document `metaservice.api.problems.problem` renders, for answers given before routing."""
    body = json.dumps(
        {
            "type": f"/problems/{code}",
            "title": title,
            "status": status,
            "detail": detail,
            "instance": scope.get("path"),
            "code": code,
            **extra,
        },
        separators=(",", ":"),
    ).encode()
    headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
