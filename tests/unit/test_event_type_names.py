"""What can be declared can be sent and subscribed to (SPEC "Event types":
names of 1 to 256 characters): the enqueue check and an endpoint's
subscriptions take the same lengths as an event type's name."""

from __future__ import annotations

import pytest

from dispatcher.core.errors import BadInput
from dispatcher.core.eventschema import check_name
from dispatcher.core.models import EndpointSpec
from dispatcher.ops.inputs import check_event_type


def test_a_256_character_name_is_declared_sent_and_subscribed() -> None:
    name = "a." * 127 + "ok"
    assert len(name) == 256
    check_name(name)
    assert check_event_type(name) == name
    EndpointSpec(url="https://example.com/h", event_types=(name,)).validate()


def test_257_characters_are_refused_everywhere() -> None:
    name = "a" * 257
    with pytest.raises(BadInput):
        check_name(name)
    with pytest.raises(BadInput, match=r"1\.\.256"):
        check_event_type(name)
    with pytest.raises(BadInput):
        EndpointSpec(url="https://example.com/h", event_types=(name,)).validate()
