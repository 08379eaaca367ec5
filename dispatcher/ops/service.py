"""The operations on endpoints, events and dead letters, under one name.

The CLI, the admin API, the Python API and the demo call these
(`service.add_endpoint`, `service.enqueue`, `service.replay`, …) with a
connection and values already read from their input; the operation, its
defaults and its checks live once, in its area's module: endpoints.py
(endpoints, their secrets and what a user sees of one), events.py
(enqueue, release, cancel, test events, the events quota), deadletters.py
(replay). This module only gathers them: a new operation goes in its
area's module and is named here. None of them runs SQL (the catalog does)
or formats output for a terminal or an HTTP response.
"""

from __future__ import annotations

from dispatcher.core.models import TEST_EVENT_TYPE
from dispatcher.ops.deadletters import DEFAULT_REPLAY_LIMIT, Replayed, replay
from dispatcher.ops.endpoints import (
    DEFAULT_GRACE_S,
    HEADER_MASK,
    MAX_GRACE_S,
    RESOLVE_TIMEOUT_S,
    add_endpoint,
    check_credentials,
    current_secret,
    delete_endpoint,
    endpoint_public,
    endpoint_record,
    get_endpoint,
    list_endpoints,
    new_secret,
    rotate_secret,
    scheme_of,
    set_enabled,
    update_endpoint,
    vet_target,
)
from dispatcher.ops.events import (
    MAX_DELAY_S,
    cancel_event,
    enqueue,
    enqueue_event,
    enqueue_file,
    release_event,
    send_test_event,
    take_event_quota,
    test_payload,
)

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_REPLAY_LIMIT",
    "HEADER_MASK",
    "MAX_DELAY_S",
    "MAX_GRACE_S",
    "RESOLVE_TIMEOUT_S",
    "TEST_EVENT_TYPE",
    "Replayed",
    "add_endpoint",
    "cancel_event",
    "check_credentials",
    "current_secret",
    "delete_endpoint",
    "endpoint_public",
    "endpoint_record",
    "enqueue",
    "enqueue_event",
    "enqueue_file",
    "get_endpoint",
    "list_endpoints",
    "new_secret",
    "release_event",
    "replay",
    "rotate_secret",
    "scheme_of",
    "send_test_event",
    "set_enabled",
    "take_event_quota",
    "test_payload",
    "update_endpoint",
    "vet_target",
]
