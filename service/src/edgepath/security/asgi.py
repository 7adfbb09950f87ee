"""ASGI middleware bounding request bodies (uvicorn has no body-size limit of its own)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from asgi_correlation_id.context import correlation_id
from starlette.exceptions import HTTPException

Scope = dict[str, Any]
#: Characters a URI path may carry unescaped (RFC 3986 §3.3 pchar and "/"; "%" is escaped again).
URI_PATH_SAFE = "/:@!$&'()*+,;=-._~"


def request_uri(scope: Scope) -> str | None:
    """The request's absolute URI without its query (scheme, Host header or server address, path)."""
    host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), None)
    if host is None and scope.get("server"):
        host = f"{scope['server'][0]}:{scope['server'][1]}"
    raw = scope.get("raw_path") or str(scope.get("path", "")).encode("utf-8", "surrogateescape")
    return f"{scope.get('scheme', 'http')}://{host}{quote(raw, safe=URI_PATH_SAFE)}" if host else None


class BodySizeLimit:
    """Answer 413 (``application/problem+json``) to any HTTP request whose body exceeds ``max_bytes``.

    Checks ``Content-Length`` up front and counts streamed (chunked) bytes, so
    an oversized body is never buffered whole. Install it with
    ``app.add_middleware`` (inside Starlette's error middleware): a streamed
    overflow then ends as a 413 (or FastAPI's 400 "error parsing the body"),
    never a 500.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(self, scope: Scope, send: Any) -> None:
        message = f"request body larger than {self.max_bytes} bytes"
        problem = {  # RFC 9457 problem details, the shape of every error of the REST API (edgepath.rest.problem)
            "type": "about:blank",
            "title": "Content Too Large",
            "status": 413,
            "detail": message,
            "error": "invalid_input",
            "field": None,
            "message": message,
            "instance": request_uri(scope),
            "request_id": correlation_id.get(),  # the x-request-id of the middleware outside this one
        }
        body = json.dumps(problem).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = True
                if too_big:
                    await self._reject(scope, send)
                    return
        received = 0
        started = False

        async def limited_receive() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, f"request body larger than {self.max_bytes} bytes")
            return message

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except HTTPException as exc:
            if started or exc.status_code != 413:
                raise
            await self._reject(scope, send)
