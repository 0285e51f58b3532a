"""Jobs waiting out a retry backoff: when each may start again, the earliest found in
O(log n) (a heap with stale entries skipped), so the controller's every step does not scan
every waiting job."""

from __future__ import annotations

import heapq


class RetryWaits:
    """Job id -> when it may start again; :meth:`due` hands out those whose time came."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []  # may hold entries no longer in _at

    def __bool__(self) -> bool:
        return bool(self._at)

    def __len__(self) -> int:
        return len(self._at)

    def get(self, job: str) -> float | None:
        """When ``job`` may start again (None: it is not waiting)."""
        return self._at.get(job)

    def set(self, job: str, at: float) -> None:
        """``job`` waits until ``at``."""
        if self._at.get(job) == at:
            return  # already so (the heap holds it)
        self._at[job] = at
        heapq.heappush(self._heap, (at, job))
        self._compact()

    def pop(self, job: str) -> None:
        """``job`` no longer waits (started, finished, or its wait was given up)."""
        if self._at.pop(job, None) is not None:
            self._compact()

    def _compact(self) -> None:
        """Rebuild the heap from the waiting jobs once stale entries outnumber them (jobs
        set and given up long before their time): O(n), amortised O(1) per change."""
        if len(self._heap) > 2 * len(self._at) + 64:
            self._heap = [(at, job) for job, at in self._at.items()]
            heapq.heapify(self._heap)

    def first(self) -> float | None:
        """The earliest time a waiting job may start (None: none waits)."""
        heap, at = self._heap, self._at
        while heap and at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # stale: the job was popped or waits until another time
        return heap[0][0] if heap else None

    def due(self, now: float) -> list[str]:
        """The jobs whose wait has run out by ``now``, no longer waiting."""
        out: list[str] = []
        while (first := self.first()) is not None and first <= now:
            _, job = heapq.heappop(self._heap)
            del self._at[job]
            out.append(job)
        return out
