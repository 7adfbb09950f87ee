"""JSON request bodies of the REST routes that read their body themselves (``/v1`` decisions and outcomes,
``/mts/v1`` sessions): after authentication, so a caller without valid credentials gets 401 (or 403) whatever
its body, never a 400 or 422 about it, and costs no parse.

Validated in one pass by pydantic's own JSON parser straight into the model (:func:`parse_body`); the OpenAPI
document still names the model as the request body (:func:`request_body`). Used by :mod:`edgepath.rest.app`
and :mod:`edgepath.rest.mts` (which ``app`` imports: the helpers live here, below both).
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

JSON = "application/json"
M = TypeVar("M", bound=BaseModel)


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
