"""Models the compiled code builds itself, as pydantic's ``BaseModel.model_construct`` builds them (issue 16).

``edgepath_native`` builds some models' instances without pydantic where it has made the model's own checks first:
a request's histories and interfaces in the gRPC decoding (:mod:`edgepath.grpc.convert`), MLPM's scheduler section
and its weights (:mod:`edgepath.adapters.mlpm`). Whether a model may be built that way, and which checks the build
must make, is read from the model itself (its core schema and decorators), so each check has one source; a model that
holds anything the build would not reproduce is left to pydantic.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def fields_schema(schema: Any) -> dict[str, Any] | None:
    """The ``model-fields`` core schema inside a model's core schema (under its validators), or None."""
    while isinstance(schema, dict):
        if schema.get("type") == "model-fields":
            return schema
        schema = schema.get("schema")
    return None


def constructible(model: type[BaseModel], model_validators: set[str]) -> bool:
    """Whether compiled code may build ``model`` as ``model_construct`` does, setting its ``__dict__``, the fields
    set, and no extra or private values: its only validators the model validators named (which the compiled check
    must make too), no private attributes or ``model_post_init``, extras not kept (``extra`` other than ``allow``).
    What each field's schema holds is the caller's to check."""
    decorators = model.__pydantic_decorators__
    return (
        set(decorators.model_validators) == model_validators
        and not decorators.field_validators
        and not decorators.validators
        and not model.__private_attributes__
        and model.__pydantic_post_init__ is None
        and model.model_config.get("extra") != "allow"
    )
