"""JSON request bodies of the REST routes that read their body themselves (``/v1`` decisions and outcomes,
``/mts/v1`` sessions): after authentication, so a caller without valid credentials gets 401 (or 403) whatever
its body, never a 400 or 422 about it, and costs no parse.

A body is read once its ``Content-Type`` says JSON (:func:`json_request_body`: 415 naming the type sent otherwise,
field ``body`` on both APIs: :class:`NotJson`),
then validated in one pass by pydantic's own JSON parser straight into the model (:func:`parse_body`); the OpenAPI
document still names the model as the request body (:func:`request_body`). Used by :mod:`edgepath.rest.app`
and :mod:`edgepath.rest.mts` (which ``app`` imports: the helpers live here, below both).
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from edgepath.rest.problem import BODY

JSON = "application/json"
M = TypeVar("M", bound=BaseModel)


class NotJson(HTTPException):
    """415 (RFC 9110 §15.5.16) for a body sent as another type than JSON: a fault of the body as a whole, so its
    problem names :attr:`field` ``body`` (:data:`~edgepath.rest.problem.BODY`, as for a body that is not JSON)
    on the ``/v1`` routes and ``/mts/v1`` alike (``/v1`` answered ``field: null``, ``/mts/v1`` ``body``)."""

    field = BODY

    def __init__(self, media: str) -> None:
        super().__init__(415, f"Content-Type {media} is not JSON: send the body as {JSON}")


def json_media_type(content_type: str | None) -> bool:
    """True when a request's ``Content-Type`` (the header's value, None when absent) may carry the JSON body of an
    operation (``/v1`` and ``/mts/v1``): ``application/json`` or a ``+json`` structured syntax suffix (RFC 6839
    §3.1), parameters (``charset``) ignored; an absent or empty header too (curl and many HTTP clients send none)."""
    if not content_type:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == JSON or (media.startswith("application/") and media.endswith("+json")) or not media


async def json_request_body(request: Request) -> bytes:
    """The request's body, once its ``Content-Type`` says JSON (:func:`json_media_type`).

    Raises
    ------
    NotJson
        415 naming the type sent, for a body sent as anything else: a form (``curl -d`` without
        ``-H 'content-type: application/json'``), text or XML would otherwise be parsed as JSON all the same and
        answered as if the client had meant it.
    """
    content_type = request.headers.get("content-type")
    if not json_media_type(content_type):
        raise NotJson((content_type or "").split(";", 1)[0].strip())
    return await request.body()


def parse_body(raw: bytes, model: type[M]) -> M:
    """Validate a JSON request body straight into ``model`` (pydantic's JSON parser; one pass).

    Raises
    ------
    RequestValidationError
        Invalid JSON (answered 400) or a value out of the model's rules (422 naming the field on ``/v1``,
        400 on ``/mts/v1``).
    """
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        # with context: a validator's own message is read from it (edgepath.errors.error_message)
        raise RequestValidationError(exc.errors(include_url=False)) from None


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route that parses its body itself (``openapi_extra``): a required JSON
    ``model``, referenced from the document's components (where the app adds the schema of each such model:
    :func:`edgepath.rest.app.install_openapi`)."""
    return {"required": True, "content": {JSON: {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}
