"""The ASGI side of the OpenLineage outbox (metaservice/openlineage/runs.py): one outbox per request, whose ended
barrier runs go to the emitter only when the answer is a success (else the change did not happen)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metaservice.openlineage import runs

if TYPE_CHECKING:
    from metaservice.openlineage.emitter import OpenLineageEmitter


class RunOutbox:
    """Pure ASGI middleware: one outbox per request, delivered to `app.state.openlineage` on a 2xx answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        box, token = runs.collecting()
        status = 0

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            runs.stop(token)
        if box and 200 <= status < 300:
            emitter: OpenLineageEmitter | None = getattr(scope["app"].state, "openlineage", None)
            if emitter is not None:
                emitter.deliver(runs.drain(box))
