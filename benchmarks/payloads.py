"""What the benchmarks send: realistic affiliate postbacks, as JSONL for
`dispatcher enqueue --file` or as request bodies for the raw client.

Standard library only; deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_OFFERS = [1042, 1187, 2210, 3301, 4478, 5120]
_STATUSES = ["approved", "approved", "approved", "pending", "rejected"]
_CURRENCIES = ["USD", "EUR", "GBP"]


def postback_payload(rng: random.Random, n: int) -> dict[str, Any]:
    """A small, realistic affiliate postback (~350 bytes of JSON)."""
    ts = 1_796_000_000 + n
    return {
        "type": "conversion",
        "conversion_id": f"conv_{n:010d}",
        "click_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "offer_id": rng.choice(_OFFERS),
        "affiliate_id": rng.randrange(100, 9999),
        "sub_id": f"sub-{rng.randrange(1, 50)}",
        "status": rng.choice(_STATUSES),
        "payout": {
            "amount": f"{rng.randrange(50, 5000) / 100:.2f}",
            "currency": rng.choice(_CURRENCIES),
        },
        "revenue": {"amount": f"{rng.randrange(100, 9000) / 100:.2f}", "currency": "USD"},
        "occurred_at": datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z"),
        "country": rng.choice(["US", "DE", "GB", "FR", "BR", "IN"]),
        "device": rng.choice(["mobile", "desktop", "tablet"]),
    }


def write_events(
    path: Path,
    jobs: Sequence[tuple[int | None, int]],
    event_type: str,
    *,
    seed: int = 7,
    keys: int = 0,
) -> int:
    """Writes `count` events per (endpoint id, count) job, interleaved, as
    JSONL; an endpoint id of None leaves the event to the subscriptions
    (fan-out by event type). `keys`: each payload also carries a
    `customer_id` out of that many (a FIFO ordering key). Returns how many
    events were written."""
    rng = random.Random(seed)
    left = [n for _, n in jobs]
    i = 0
    with path.open("w", encoding="utf-8") as f:
        while any(left):
            for k, (endpoint, _) in enumerate(jobs):
                if left[k]:
                    left[k] -= 1
                    payload = postback_payload(rng, i)
                    if keys:
                        payload["customer_id"] = f"cust-{i % keys}"
                    line: dict[str, Any] = {"event_type": event_type, "payload": payload}
                    if endpoint is not None:
                        line["endpoint"] = endpoint
                    f.write(json.dumps(line, separators=(",", ":")) + "\n")
                    i += 1
    return i


def bodies(n: int) -> Iterator[bytes]:
    """n encoded postbacks, for clients that send them without the dispatcher."""
    rng = random.Random(11)
    for i in range(n):
        yield json.dumps(postback_payload(rng, i), separators=(",", ":")).encode()
