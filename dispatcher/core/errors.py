"""The one exception tree of dispatcher.

    DispatcherError
    ├── BadInput          user-supplied data is wrong (CLI exit 2, HTTP 400)
    │   ├── NotFound          (HTTP 404)
    │   │   ├── UnknownEndpoint
    │   │   └── UnknownApplication
    │   ├── Forbidden         outside the caller's application (HTTP 403)
    │   ├── Conflict          refused in the current state (HTTP 409)
    │   ├── Unprocessable     well-formed, refused by the event type (HTTP 422)
    │   └── Throttled         past a rate quota, try again later (HTTP 429)
    ├── TargetRefused     the SSRF guard refused a destination
    └── OperationalError  the database or the machine failed us (CLI exit 1)

Messages are single lines meant for people; they never carry payload data,
except that an Unprocessable answer may quote up to 200 characters of the
caller's own payload back to it (where it fails a schema); it is not logged.
"""

from __future__ import annotations


class DispatcherError(Exception):
    """Base of every error dispatcher raises on purpose."""

    exit_code = 1


class BadInput(DispatcherError):
    exit_code = 2


class NotFound(BadInput):
    pass


class UnknownEndpoint(NotFound):
    pass


class UnknownApplication(NotFound):
    pass


class Forbidden(BadInput):
    """An application's credential asked for something outside its application."""


class Conflict(BadInput):
    """The request is well-formed but the state refuses it (an endpoint
    with queued deliveries cannot be deleted without force)."""


class Unprocessable(BadInput):
    """The request is well-formed but its payload is refused by its event
    type: it fails the type's schema, or the type is archived. Nothing was
    queued."""


class Throttled(BadInput):
    """Past an application's events quota: nothing was done; the same call
    may succeed after `retry_after_s` (whole seconds, at least 1)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TargetRefused(DispatcherError):
    """A destination resolved to an address the SSRF guard does not allow."""

    exit_code = 2


class OperationalError(DispatcherError):
    exit_code = 1
