"""Secrets never shown (issue 23 finding 8): one redaction helper (app/core/redact.py) for every URL
the service shows, and every log line, reply and stored error that can hold a URL or a DSN."""

from __future__ import annotations

import logging

import pytest

from app.core import redact
from app.core.errors import ConfigError
from app.core.metrics import Metrics
from app.rules.delivery.mqtt.publisher import BrokerTarget
from app.rules.delivery.webhooks import WebhookOptions, WebhookWorker
from app.rules.store.db import EventStore
from app.rules.store.errors import describe
from app.rules.store.writer import EventWriter
from tests.support.net import free_port
from tests.support.rules_util import Receiver, outbox_rows
from tests.support.wait import wait_for
from tests.support.webhooks import enqueue

SECRETS = ("hunter2", "T0KEN", "sig=abc", "PATHSECRET")


def clean(text: str) -> bool:
    return not any(s in text for s in SECRETS)


@pytest.mark.parametrize("url, shown", [
    ("https://user:hunter2@hooks.example/x/PATHSECRET?token=T0KEN", "https://hooks.example"),
    ("http://127.0.0.1:8123/api/webhook/PATHSECRET", "http://127.0.0.1:8123"),
    ("mqtts://user:hunter2@broker:8883", "mqtts://broker:8883"),
    ("http://[::1]:8080/a?sig=abc", "http://[::1]:8080"),
    ("HTTP://Hooks.Example:443/#frag", "http://hooks.example:443"),
    ("http://h:99999/PATHSECRET", "http://h"),  # a bad port is dropped, the rest still hidden
    ("no scheme hunter2", redact.UNPARSEABLE),
    ("http://[::1/PATHSECRET", redact.UNPARSEABLE),
])
def test_targets_show_scheme_host_and_port_only(url, shown):
    assert redact.target(url) == shown


@pytest.mark.parametrize("url, shown", [
    ("postgresql+psycopg://app:hunter2@db:5432/events?sslmode=require&password=hunter2",
     "postgresql+psycopg://app:***@db:5432/events"),
    ("postgresql://app:p%40hunter2@db/events", "postgresql://app:***@db/events"),
    ("postgresql://app@db/events?password=hunter2", "postgresql://app@db/events"),
    ("sqlite:///.cache/campusguard/events.db", "sqlite:///.cache/campusguard/events.db"),
    ("garbage://///u:hunter2@@", "garbage://///u:***@@"),
])
def test_dsns_mask_the_password_and_drop_the_query(url, shown):
    assert redact.dsn(url) == shown


def test_free_text_has_its_urls_and_password_pairs_scrubbed():
    text = ("POST https://u:hunter2@hooks.example/PATHSECRET?token=T0KEN failed (see http://h:1/x/PATHSECRET). "
            "invalid dsn: host=db password=hunter2 user=app")
    out = redact.scrub(text)
    assert out == ("POST https://hooks.example failed (see http://h:1). invalid dsn: host=db password=*** user=app")


def test_a_failed_webhook_delivery_never_logs_or_stores_its_path_query_or_credentials(db_url, caplog):
    store = EventStore(db_url)
    receiver = Receiver(fail_first=100)  # answers 500
    refused = f"http://user:hunter2@127.0.0.1:{free_port()}/hook/PATHSECRET?token=T0KEN"  # nothing listens
    failing = f"http://user:hunter2@127.0.0.1:{receiver.port}/hook/PATHSECRET?token=T0KEN&sig=abc"
    worker = WebhookWorker(store, WebhookOptions((failing, refused), timeout_s=2.0, max_backoff_s=0.2),
                           metrics=Metrics(), poll_s=0.1)
    enqueue(store, failing, "e1")
    enqueue(store, refused, "e2")
    try:
        with caplog.at_level(logging.DEBUG):
            worker.start()
            assert wait_for(lambda: sum(s["failed"] for s in worker.state()) >= 4)
    finally:
        worker.stop()
        receiver.close()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("campusguard")]
    assert len([ln for ln in lines if "failed" in ln]) >= 4
    assert all(clean(ln) for ln in lines), lines
    assert any(f"webhook http://127.0.0.1:{receiver.port} for e1:started failed (HTTP 500)" in ln for ln in lines)
    assert any(f"webhook http://127.0.0.1:{refused.split(':')[3].split('/')[0]} for e2:started failed" in ln
               for ln in lines)
    assert all(clean(str(s)) for s in worker.state())  # GET /status and the console show these
    assert {s["target"] for s in worker.state()} == {redact.target(failing), redact.target(refused)}
    stored = [row["last_error"] for row in outbox_rows(store)]
    assert all(stored) and all(clean(e) for e in stored), stored
    store.close()


def test_event_store_messages_mask_the_password(tmp_path, caplog):
    with pytest.raises(ConfigError) as bad:
        EventStore("postgresql+psycopg://app:hunter2@db:notaport/events", migrate=False)
    assert clean(str(bad.value)) and "postgresql+psycopg://app:***@db:notaport/events" in str(bad.value)

    store = EventStore(f"postgresql+psycopg://app:hunter2@127.0.0.1:{free_port()}/events?password=hunter2",
                       migrate=False)
    assert store.safe_url == f"postgresql+psycopg://app:***@127.0.0.1:{store.engine.url.port}/events"
    writer = EventWriter(store, capacity=10, retry_s=0.1, metrics=Metrics())
    with caplog.at_level(logging.INFO):
        writer.connect()  # unreachable: one error line naming the store
    lines = [r.getMessage() for r in caplog.records]
    assert any("app:***@127.0.0.1" in ln for ln in lines) and all(clean(ln) for ln in lines), lines
    assert clean(writer.status())
    store.close()


def test_driver_errors_quoting_a_conninfo_are_scrubbed():
    class ProgrammingError(Exception):
        pass

    text = describe(ProgrammingError('invalid dsn: missing "=" after "hunter2" in "host=x password=hunter2 y"'))
    assert "password=***" in text and text.startswith("ProgrammingError: ")


def test_a_bad_broker_url_is_named_without_its_credentials():
    with pytest.raises(ConfigError) as bad:
        BrokerTarget.parse("amqp://user:hunter2@broker:5672/PATHSECRET")
    assert clean(str(bad.value)) and "amqp://broker:5672" in str(bad.value)
    assert BrokerTarget.parse("mqtts://user:hunter2@broker").outbox_url == "mqtts://broker:8883"


def test_the_service_logging_never_shows_a_webhook_url_httpx_requests():
    """httpx logs each request's full URL at INFO (user info, path token): under the
    service's logging setup (``campusguard serve``, the gateway) it says nothing per request."""
    import io
    import sys

    import httpx

    from app.core.logs import QUIET_LOGGERS, configure_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level, {n: logging.getLogger(n).level for n in QUIET_LOGGERS}
    stream, stderr = io.StringIO(), sys.stderr
    try:
        sys.stderr = stream
        configure_logging("text", "DEBUG")
        transport = httpx.MockTransport(lambda request: httpx.Response(204))
        with httpx.Client(transport=transport) as client:
            assert client.post("https://user:hunter2@hooks.example/x/PATHSECRET?token=T0KEN").status_code == 204
        logging.getLogger("campusguard.test").info("delivered")  # the handler is live
    finally:
        sys.stderr = stderr
        root.handlers[:], root.level = saved[0], saved[1]
        for name, level in saved[2].items():
            logging.getLogger(name).setLevel(level)
    text = stream.getvalue()
    assert "delivered" in text and clean(text), text
