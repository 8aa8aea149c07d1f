"""Schemathesis fuzzes the live /openapi.json: no 5xx, no reply outside the documented schema."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                              status_code_conformance)

# positive_data_acceptance is left out on purpose: a "format: binary" field is filled with random
# bytes, which the contract rightly refuses (400/415): schema-valid is not image-valid.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES_PER_OPERATION = 25


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, weights):
    from tests.conftest import start_server

    server = start_server(tmp_path_factory.mktemp("fuzz"), imgsz=320, queue_size=256, max_body_bytes=2_000_000)
    yield server
    server.stop()


def test_every_operation_conforms_and_never_fails(fuzz_server):
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
        "POST /detect", "POST /detect/batch", "POST /v1/vision/detection", "GET /health", "GET /metrics"}
    for op in operations:
        @given(case=op.as_strategy())
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck),
                  derandomize=True, database=None)
        def fuzz(case):
            case.call_and_validate(base_url=fuzz_server.url, checks=CHECKS, timeout=60)

        fuzz()
    assert httpx.get(f"{fuzz_server.url}/health/ready").status_code == 200
