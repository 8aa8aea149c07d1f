"""Schemathesis fuzzes the live /openapi.json: no 5xx, no reply outside the documented schema."""

from __future__ import annotations

import shutil
from collections import Counter

import httpx
import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,

                                              status_code_conformance)

pytestmark = pytest.mark.server  # module-scoped real servers (markers: tests/conftest.py)

# positive_data_acceptance is left out on purpose: a "format: binary" field is filled with random
# bytes, which the contract rightly refuses (400/415): schema-valid is not image-valid.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES_PER_OPERATION = 12  # ~40 operations: every one still gets its edge cases (derandomized)
KEYED_EXAMPLES_PER_OPERATION = 6  # the second server repeats the walk cheaply: auth, rules and events routes
KEY = "fuzz-key"


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, weights):
    from tests.conftest import start_server

    server = start_server(tmp_path_factory.mktemp("fuzz"), weights, imgsz=320, queue_size=256, max_body_bytes=2_000_000)
    yield server
    server.stop()


def fuzz_all(url: str, examples: int, config: SchemathesisConfig | None = None, **load) -> Counter:
    """Fuzz every operation of the live schema; the status codes seen, by operation."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=config, **load)
    operations = [result.ok() for result in schema.get_all_operations()]
    seen: Counter = Counter()
    for op in operations:
        @given(case=op.as_strategy())
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
                  derandomize=True, database=None)
        def fuzz(case):
            response = case.call_and_validate(base_url=url, checks=CHECKS, timeout=60)
            seen[(f"{op.method.upper()} {op.path}", response.status_code)] += 1

        fuzz()
    return seen


def test_every_operation_conforms_and_never_fails(fuzz_server):
    seen = fuzz_all(fuzz_server.url, EXAMPLES_PER_OPERATION)
    assert {op for op, _ in seen} >= {
        "POST /detect", "POST /detect/batch", "POST /v1/vision/detection", "GET /health", "GET /metrics"}
    assert httpx.get(f"{fuzz_server.url}/health/ready").status_code == 200


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory, weights):
    from tests.conftest import REPO, start_server

    root = tmp_path_factory.mktemp("fuzz-keyed")
    site = root / "site.yaml"
    shutil.copy(REPO / "deploy" / "site.example.yaml", site)
    server = start_server(root, weights, imgsz=320, queue_size=256, max_body_bytes=2_000_000, api_keys=KEY,
                          site_config=site, events_db_url=f"sqlite:///{root}/events.db", snapshot_dir=root / "snaps")
    yield server
    server.stop()


def test_keyed_server_with_site_file_conforms(keyed_server):
    """The key reaches every operation through the declared `ApiKey` security scheme."""
    config = SchemathesisConfig.from_dict({"auth": {"openapi": {"ApiKey": {"api_key": KEY}}}})
    seen = fuzz_all(keyed_server.url, KEYED_EXAMPLES_PER_OPERATION, config, headers={"X-API-Key": KEY})
    operations = {op for op, _ in seen}
    assert {"GET /events", "GET /events/{event_id}", "POST /admin/reload", "POST /detect"} <= operations
    assert not [k for k in seen if k[1] in (401, 403)], seen  # the scheme carried the key everywhere
    assert httpx.get(f"{keyed_server.url}/metrics").status_code == 401
