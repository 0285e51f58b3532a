"""A service on an emulated heterogeneous lab: the digits classifier behind accelnet's router,
replicas between 1 and 4 on H100s, L4s and T4s, grown with a short load ramp and shrunk after.

    python examples/serve/digits.py            # about 30 s; prints the replicas as they change
    python examples/serve/digits.py torch      # the same with a small torch MLP (.[torch])
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

import httpx

from accelnet.runtime.sdk import LocalCluster

SPEC = {
    "name": "digits",
    "run": f"{sys.executable} -m accelnet.workloads.digits_service --base-ms 20",
    "resources": {"accelerators": {"any_of": ["H100-SXM", "L4", "T4"], "count": 1}},
    "replicas": {"min": 1, "max": 4},
    "goal": {"p95_ms": 250, "target_inflight": 1},
    "scaling": {"up_s": 0.5, "down_s": 2, "window_s": 2},
}


def ramp(url: str, clients: int, requests: int) -> list[int]:
    codes: list[int] = []

    def client(i: int) -> None:
        with httpx.Client(timeout=30) as h:
            for k in range(requests):
                codes.append(h.get(f"{url}/predict", params={"index": i * 100 + k}).status_code)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def show(service: object, what: str) -> None:
    reps = service.replicas()  # type: ignore[attr-defined]
    st = service.stats()  # type: ignore[attr-defined]
    models = sorted(str(r["model"]) for r in reps.values() if r["ready"])
    p95 = "-" if st.p95_ms is None else f"{st.p95_ms:.0f} ms"
    print(f"{what:<22} replicas {len(models)} {models}  {st.rate:5.1f} req/s  p95 {p95}")


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "logreg"  # logreg or torch
    spec = {**SPEC, "run": f"{SPEC['run']} --model {model}"}
    with tempfile.TemporaryDirectory() as work, LocalCluster("mixed-lab", workdir=work) as c, \
            c.serve(spec) as svc:  # fmt: skip
        while svc.ready_count() < 1:
            time.sleep(0.1)
        print(f"service at {svc.url}")
        show(svc, "ready")
        done: list[int] = []
        t = threading.Thread(target=lambda: done.extend(ramp(svc.url, 8, 60)))
        t.start()
        while t.is_alive():
            time.sleep(1)
            show(svc, "under load")
        print(f"{len(done)} requests, {done.count(200)} answered 200")
        for _ in range(8):
            time.sleep(1)
            show(svc, "idle")


if __name__ == "__main__":
    main()
