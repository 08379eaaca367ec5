"""The span resource's service.name (worker/spanexport.py) follows
OpenTelemetry's precedence: OTEL_SERVICE_NAME, then OTEL_RESOURCE_ATTRIBUTES,
then ours ("dispatcher")."""

from __future__ import annotations

import pytest

from dispatcher.worker.spanexport import provider

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}


@pytest.mark.parametrize(
    ("env", "service"),
    [
        ({}, "dispatcher"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "deployment=eu,service.name=shop%20api"}, "shop api"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=shop", "OTEL_SERVICE_NAME": "pay"}, "pay"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name="}, "dispatcher"),
    ],
)
def test_service_name_precedence(
    env: dict[str, str], service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in ("OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():  # the SDK's resource detector reads os.environ too
        monkeypatch.setenv(k, v)
    made, _ = provider({**ENDPOINT, **env})
    try:
        assert made.resource.attributes["service.name"] == service
    finally:
        made.shutdown()
