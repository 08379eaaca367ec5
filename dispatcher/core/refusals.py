"""Which endpoint URLs the SSRF guard refuses as written, and the words that
warn of one.

`run` says it at start for every enabled endpoint (ops/preflight.py), and a
running worker says it when it first sees one added, moved to such an
address or enabled again (worker/gate.py): the same words, so that an
endpoint whose every delivery would die as `refused target` is named before
the first dead letter. Judged without DNS (a literal loopback, private or
link-local address, or `localhost`): a name is judged by the sender after it
resolves, and a worker with many endpoints must not wait on DNS to start.
"""

from __future__ import annotations

from dispatcher.core.errors import BadInput
from dispatcher.core.shaping import url_sample
from dispatcher.core.ssrf import TargetPolicy, check_target, parse_target


def refused_host(url: str, policy: TargetPolicy, macro_style: str = "brace") -> str | None:
    """The host of `url` when the guard refuses it as written, else None. A
    URL the sender cannot read at all is None here: the worker reports that
    one as unusable (`endpoint_broken`), not as a refused address."""
    try:
        sample = url_sample(url, macro_style)
        host = parse_target(sample).raw_host or ""
    except BadInput:
        return None
    try:
        check_target(_as_address(sample, host), policy)
    except BadInput:
        return host
    return None


def _as_address(url: str, host: str) -> str:
    """`localhost` is loopback by definition (RFC 6761): judged as 127.0.0.1."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return url.replace(host, "127.0.0.1", 1)
    return url


def refusal_warning(endpoint_id: int, host: str, name: str | None = None) -> str:
    """The warning, without the `dispatcher: warning: ` its line starts with."""
    named = f" ({name})" if name else ""
    return (
        f"endpoint {endpoint_id}{named} targets {host}, which the SSRF guard refuses: its "
        "deliveries will fail as `refused target` (DISPATCHER_ALLOW_PRIVATE_TARGETS=1 allows "
        "private targets)"
    )
