"""The service's own replies are validated as they are built, and a bad one is the service's error, not the caller's."""

from __future__ import annotations

import pytest
from edgepath.adapters.congestion import congestion_advice
from edgepath.adapters.mlpm import scheduler_advice
from edgepath.settings import Settings
from edgepath.types import (
    AccessType,
    InterfaceContext,
    PrimaryPath,
    Recommendation,
    RecommendRequest,
    service_output,
)


def test_valid_values_build_the_model_and_keep_section_instances_as_they_are() -> None:
    request = RecommendRequest(
        device_id="d-1", interfaces=[InterfaceContext(name="wlan0", access_type=AccessType.WIFI)]
    )
    congestion = congestion_advice(request)
    path = {"interface": "wlan0", "access_type": AccessType.WIFI, "propensity": 0.75, "arms": [AccessType.WIFI]}
    rec = service_output(
        Recommendation,
        {
            "decision_id": "d" * 22,
            "model_version": 3,
            "policy": "ridge_squarecb",
            "primary_path": path,
            "decided_at_unix_ms": 1_764_000_000_000,
            "congestion": congestion,
            "scheduler": scheduler_advice(request, Settings()),
        },
    )
    assert rec.primary_path == PrimaryPath(**path)
    assert rec.congestion is congestion  # not copied, not validated again


def test_an_invalid_reply_is_an_internal_error_not_a_validation_error() -> None:
    """A ``ValidationError`` would be answered as the caller's bad input (HTTP 422, ``INVALID_ARGUMENT``)."""
    with pytest.raises(RuntimeError, match="invalid PrimaryPath") as info:
        service_output(
            PrimaryPath,
            {"interface": "wlan0", "access_type": AccessType.WIFI, "propensity": 1.5, "arms": [AccessType.WIFI]},
        )
    assert "propensity" in str(info.value)
