"""A closed-loop HTTP load generator in a process of its own (so that the load does not
share an interpreter with what it measures): ``--concurrency`` requests in flight for
``--seconds`` against ``--url``, each the next ``GET /predict?index=k`` (``--rate``: open
loop instead, that many requests a second, at most ``--concurrency`` in flight). Prints
one JSON line: the requests' latencies (s), their status codes, when each ended (s from
the start).

    python bench/loadgen.py --url http://127.0.0.1:8000 --concurrency 4 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import httpx


async def run(
    url: str, concurrency: int, seconds: float, path: str, rate: float = 0.0
) -> dict[str, list[float]]:
    lat: list[float] = []
    codes: list[float] = []
    ended: list[float] = []
    t0 = time.perf_counter()
    stop = t0 + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def shoot(k: int) -> None:
            t = time.perf_counter()
            try:
                code = (await client.get(f"{url}{path}", params={"index": k})).status_code
            except httpx.HTTPError:
                code = 0
            now = time.perf_counter()
            lat.append(now - t)
            codes.append(code)
            ended.append(now - t0)

        async def worker(i: int) -> None:
            k = i * 1_000_000
            while time.perf_counter() < stop:
                await shoot(k)
                k += 1

        async def one(k: int, slots: asyncio.Semaphore) -> None:
            async with slots:
                await shoot(k)

        if rate > 0:  # open loop: a request every 1/rate s, at most `concurrency` in flight
            slots = asyncio.Semaphore(concurrency)
            tasks, k = [], 0
            while (due := t0 + k / rate) < stop:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                tasks.append(asyncio.create_task(one(k, slots)))
                k += 1
            await asyncio.gather(*tasks)
        else:
            await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return {"latency_s": lat, "codes": codes, "ended_s": ended}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--path", default="/predict")
    ap.add_argument("--rate", type=float, default=0.0, help="requests/s, open loop (0: closed)")
    args = ap.parse_args()
    out = asyncio.run(run(args.url, args.concurrency, args.seconds, args.path, args.rate))
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
