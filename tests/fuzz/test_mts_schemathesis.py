"""schemathesis driven by ETSI's own MEC 015 OpenAPI file against the running ``/mts/v1`` (issue 19).

The schema is the vendored ``service/data/etsi-mec-015/TrafficSteeringApi.yaml`` as ETSI published it,
not EdgePath's ``/openapi.json``: every operation is called with schema-valid and schema-violating inputs
and every answer must be no server error, have a status the operation documents, and a body that conforms
to the documented schema and content type. ETSI's ``MtsSessionInfo`` has no device member, so generated
sessions are refused (400 ProblemDetails, documented); the CRUD path with EdgePath's ``deviceId`` is in
tests/service/test_mts_api.py. Bounded: ``max_examples`` per operation, no deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fuzz_figures import record
from fuzz_helpers import fuzz_settings
from hypothesis import given
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from service_harness import RunningService, running_service

SPEC = Path(__file__).resolve().parents[2] / "service" / "data" / "etsi-mec-015" / "TrafficSteeringApi.yaml"
RUN = "rest-schemathesis-mec015"
SETTINGS = fuzz_settings(20)  # EDGEPATH_FUZZ_EXAMPLES / EDGEPATH_FUZZ_SEED: nightly-sized runs


@pytest.fixture(scope="module")
def mts_service() -> Iterator[RunningService]:
    with running_service() as svc:
        body = {"device_id": "phone-fuzz", "interfaces": [{"name": "wlan0", "access_type": "WIFI"}]}
        assert httpx.post(f"{svc.http_url}/v1/recommendations", json=body, timeout=5.0).status_code == 200
        yield svc


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_etsi_schema_operations_conform(mts_service: RunningService, mode: Any) -> None:
    schema = schemathesis.openapi.from_path(str(SPEC))
    base_url = f"{mts_service.http_url}/mts/v1"
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 6  # capability info, list, create, read, replace, delete
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @SETTINGS
        def run(case: Any) -> None:
            response = case.call(base_url=base_url)
            record(RUN, str(response.status_code))
            case.validate_response(response, checks=checks)

        try:
            run()
        except Unsatisfiable:  # nothing to violate (GET /mts_capability_info has no inputs)
            assert mode is GenerationMode.NEGATIVE
