"""The raw ceiling: a bare aiohttp client, in a process of its own.

    python -m benchmarks.rawclient --url URL --requests N --concurrency C --secret S

The same client setup, body kind and headers as the dispatcher's sender, and
nothing else (no database, no bookkeeping): what one Python process can POST
to the same receiver. Prints one JSON document. Imports nothing of the
harness but the payloads, so that it measures only itself.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import hashlib
import hmac
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import uvloop

from dispatcher import __version__

from .payloads import bodies


def _signer(secret: str) -> Callable[[str, int, bytes], str]:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    base = hmac.new(key, digestmod=hashlib.sha256)

    def sign(msg_id: str, ts: int, body: bytes) -> str:
        m = base.copy()
        m.update(f"{msg_id}.{ts}.".encode())
        m.update(body)
        return "v1," + base64.b64encode(m.digest()).decode()

    return sign


async def raw_client(
    url: str, requests: int, concurrency: int, secret: str, prefix: str
) -> dict[str, Any]:
    """`requests` signed POSTs over `concurrency` workers; counts and rate."""
    # The same collector tuning as `dispatcher run` (see cmd_run), so the
    # ceiling is not lowered by garbage collection the dispatcher avoids.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    sign = _signer(secret)
    body_list = list(bodies(min(requests, 1000)))
    user_agent = f"dispatcher/{__version__}"
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30)
    timeout = aiohttp.ClientTimeout(total=15)
    ok = errors = 0
    next_i = 0

    async with aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
        cookie_jar=aiohttp.DummyCookieJar(),
    ) as session:

        async def worker() -> None:
            nonlocal ok, errors, next_i
            while next_i < requests:
                i = next_i
                next_i += 1
                body = body_list[i % len(body_list)]
                msg_id = f"{prefix}{i}"
                ts = int(time.time())
                headers = {
                    "content-type": "application/json",
                    "user-agent": user_agent,
                    "webhook-id": msg_id,
                    "webhook-timestamp": str(ts),
                    "webhook-signature": sign(msg_id, ts, body),
                }
                try:
                    async with session.post(
                        url, data=body, headers=headers, allow_redirects=False, timeout=timeout
                    ) as resp:
                        await resp.read()
                        if 200 <= resp.status < 300:
                            ok += 1
                        else:
                            errors += 1
                except (aiohttp.ClientError, OSError, TimeoutError):
                    errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, requests))))
        elapsed = time.perf_counter() - t0
    return {
        "requests": requests,
        "ok": ok,
        "errors": errors,
        "seconds": round(elapsed, 3),
        "per_min": round(ok / elapsed * 60, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rawclient")
    p.add_argument("--url", required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--id-prefix", default="raw_")
    a = p.parse_args(argv)
    if a.requests < 1 or a.concurrency < 1:
        p.error("--requests and --concurrency must be at least 1")
    doc = uvloop.run(raw_client(a.url, a.requests, a.concurrency, a.secret, a.id_prefix))
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
