"""``accelnet.Client``: the REST API (docs/api.md) as typed Python calls, over httpx.

    from accelnet import Client

    with Client("http://127.0.0.1:8765", token) as api:
        job = api.submit({"name": "hello", "run": "echo hi", "resources": {"accelerators": "L4:1"}})
        done = api.wait(job, timeout=60)
        print(done.state, api.logs(job))

Every call blocks until the server answers and raises :class:`ApiError` when it refuses
(``status``, ``code``, ``message``, ``field``) or cannot be reached (``status`` 0). A 429
is retried after the server's ``Retry-After`` (``rate_retries`` times; the request was not
carried out, so a retried submission is never doubled). :meth:`Client.submit` sends an
``Idempotency-Key`` (a new UUID per call) and retries, with that same key, what may have
failed half-way (no answer, a timeout, a 5xx) for up to ``submit_retry_s`` seconds: the
server answers a retry with the jobs the first attempt made, so a submission that returns
was stored exactly once. A client is thread-safe (one httpx connection pool); close it,
or use it as a context manager.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from accelnet.client.config import resolve
from accelnet.client.errors import ApiError, unreachable
from accelnet.client.jobspecs import JobLike, ServiceLike, file_specs, service_dict, spec_dict
from accelnet.client.models import (
    AuditPage,
    DeviceOpOut,
    DeviceOut,
    EventOut,
    EventsPage,
    Health,
    JobOut,
    JobsPage,
    LogChunk,
    PolicyOut,
    ServiceOut,
    TenantOut,
    WhoAmI,
)
from accelnet.client.streams import Stream, sse_events

V1 = "/api/v1"
MAX_BATCH = 1000
KEY_HEADER = "Idempotency-Key"
FIRST_PAUSE_S = 0.05  # between two tries of a submission: doubling, jittered, at most
MAX_PAUSE_S = 1.0
DEVICE_OPS = ("drain", "undrain", "reset", "probe")
JobRef = str | JobOut
"""A job: its id, or a :class:`JobOut`."""
_M = TypeVar("_M", bound=BaseModel)


def base_url(url: str) -> str:
    """``127.0.0.1:8765`` -> ``http://127.0.0.1:8765``; a trailing ``/`` or ``/api/v1``
    is dropped."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    return url.removesuffix(V1).rstrip("/")


def _job_id(job: JobRef) -> str:
    return job.id if isinstance(job, JobOut) else job


def _segment(text: str, safe: str = "") -> str:
    return quote(text, safe=safe)


class Client:
    """A client of one accelnet server (see the module docstring).

    ``url``: the server (``http://127.0.0.1:8765``; the scheme defaults to http);
    ``token``: a bearer token (``accelnet token create``); ``timeout``: seconds for each
    call (streams wait for data without limit); ``rate_retries``: how often a 429 is
    retried; ``submit_retry_s``: how long :meth:`submit` retries a submission that got
    no answer, a timeout or a 5xx (0: not at all); ``verify``: TLS verification (True,
    False, a CA bundle's path or an ``ssl.SSLContext``); ``transport``: an
    httpx transport (tests). ``submit_retries`` counts the retries made so far."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        rate_retries: int = 3,
        submit_retry_s: float = 30.0,
        verify: bool | str | ssl.SSLContext = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = base_url(url)
        self.rate_retries = rate_retries
        self.submit_retry_s = submit_retry_s
        self.submit_retries = 0
        self.timeout = timeout
        self._count_lock = threading.Lock()
        self._jitter = random.Random()
        headers = {"User-Agent": "accelnet-client"}
        if token:
            headers["Authorization"] = f"Bearer {token.strip()}"
        if isinstance(verify, str):  # a CA bundle (a server with --tls-cert of its own)
            verify = ssl.create_default_context(cafile=verify)
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, verify=verify,
            transport=transport,
        )  # fmt: skip
        self._sleep: Callable[[float], None] = time.sleep
        self._now: Callable[[], float] = time.monotonic  # the waits' clock (tests replace it)

    @classmethod
    def from_config(cls, url: str | None = None, token: str | None = None, **kwargs: Any) -> Client:
        """A client for the URL and token found by :func:`accelnet.client.config.resolve`
        (arguments, then ``ACCELNET_URL``/``ACCELNET_TOKEN``, then the config file);
        ConfigError if either is missing."""
        found_url, found_token = resolve(url, token).require()
        return cls(found_url, found_token, **kwargs)

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """One call (``path`` under the server's root, e.g. ``/api/v1/whoami``); 429s
        retried; ApiError for an error answer or no answer."""
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        sent = dict(headers or {})
        if content is not None:
            sent["Content-Type"] = "application/json"
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in range(self.rate_retries + 1):
            try:
                r = self._http.request(method, path, params=clean, content=content, headers=sent)
            except httpx.TransportError as exc:
                raise unreachable(self.url, exc) from None
            if r.status_code == 429 and attempt < self.rate_retries:
                self._back_off(r)
                continue
            if r.is_error:
                raise ApiError.from_response(r)
            return r
        raise AssertionError("unreachable")  # pragma: no cover

    def _back_off(self, r: httpx.Response) -> None:
        wait = ApiError.from_response(r).retry_after
        self._sleep(min(10.0, wait if wait is not None else 1.0))

    def _get(self, model: type[_M], path: str, **params: Any) -> _M:
        return self._parse(model, self.request("GET", path, params=params))

    def _parse(self, model: type[_M], r: httpx.Response) -> _M:
        try:
            return model.model_validate(r.json())
        except (ValueError, ValidationError) as exc:
            raise ApiError(
                r.status_code, "bad_response",
                f"{self.url}{r.request.url.path} did not answer as an accelnet server does: "
                f"{str(exc).splitlines()[0][:200]}",
            ) from None  # fmt: skip

    def _open_stream(
        self, path: str, params: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> httpx.Response:
        """A streamed GET whose answer is a success (errors and 429s as :meth:`request`);
        reads wait for data without a time limit. The caller closes it."""
        clean = {k: v for k, v in params.items() if v is not None}
        timeout = httpx.Timeout(self.timeout, read=None)
        for attempt in range(self.rate_retries + 1):
            request = self._http.build_request(
                "GET", path, params=clean, headers=dict(headers or {}), timeout=timeout
            )
            try:
                r = self._http.send(request, stream=True)
                if r.is_error:
                    r.read()
                    r.close()
            except httpx.TransportError as exc:
                raise unreachable(self.url, exc) from None
            if r.status_code == 429 and attempt < self.rate_retries:
                self._back_off(r)
                continue
            if r.is_error:
                raise ApiError.from_response(r)
            return r
        raise AssertionError("unreachable")  # pragma: no cover

    # -- service ---------------------------------------------------------------------

    def health(self) -> Health:
        """``GET /healthz`` (no token needed): ``ok``, or ``degraded`` (an ApiError with
        status 503) when the controller has stopped."""
        return self._get(Health, "/healthz")

    def whoami(self) -> WhoAmI:
        """The token's id, tenant, role and name."""
        return self._get(WhoAmI, f"{V1}/whoami")

    # -- jobs ------------------------------------------------------------------------

    @overload
    def submit(self, jobs: JobLike, *, idempotency_key: str | None = None) -> JobOut: ...

    @overload
    def submit(
        self, jobs: str | os.PathLike[str], *, idempotency_key: str | None = None
    ) -> list[JobOut]: ...

    @overload
    def submit(
        self,
        jobs: Sequence[JobLike | str | os.PathLike[str]],
        *,
        idempotency_key: str | None = None,
    ) -> list[JobOut]: ...

    def submit(
        self,
        jobs: JobLike | str | os.PathLike[str] | Sequence[JobLike | str | os.PathLike[str]],
        *,
        idempotency_key: str | None = None,
    ) -> JobOut | list[JobOut]:
        """Submit jobs; all of one call or none (one request, at most 1000 jobs), stored
        exactly once: the request carries an ``Idempotency-Key`` (``idempotency_key``, by
        default a new UUID) and is retried with it, for up to ``submit_retry_s`` seconds,
        after no answer, a timeout or a 5xx (the server answers a retry with the jobs the
        first attempt made). Give your own key to retry later yourself (after a process
        restart): the same key and the same jobs answer the jobs made the first time, for
        24 hours; the same key with other jobs is a 409 ``conflict``.

        ``jobs``: one spec (a mapping or a ``JobSpec``) -> its :class:`JobOut`; a job
        file's path (YAML or JSON, one job or ``jobs: [...]``, validated here first:
        ``JobSpecError`` names the file, line and key) or a list of specs and paths ->
        a list of :class:`JobOut`, in the order sent (a file's jobs each after the jobs
        it takes ``inputs`` from; inputs may name earlier jobs of the same call). A job
        without ``tenant`` is the token's. ApiError 422 ``invalid`` names the field
        (``jobs[1].resources.accelerators``), 422 ``over_quota`` the tenant and model."""
        key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
        if isinstance(jobs, Mapping | BaseModel):
            return self._submit([spec_dict(jobs)], key)[0]
        items: Iterable[JobLike | str | os.PathLike[str]]
        items = [jobs] if isinstance(jobs, str | os.PathLike) else jobs
        specs: list[dict[str, Any]] = []
        for item in items:
            if isinstance(item, str | os.PathLike):
                specs += [spec_dict(s) for s in file_specs(item)]
            else:
                specs.append(spec_dict(item))
        return self._submit(specs, key) if specs else []

    def _submit(self, specs: list[dict[str, Any]], key: str) -> list[JobOut]:
        if len(specs) > MAX_BATCH:
            raise ValueError(f"{len(specs)} jobs in one call; at most {MAX_BATCH} (all or none)")
        body: Any = specs[0] if len(specs) == 1 else {"jobs": specs}
        headers = {KEY_HEADER: key}
        end = self._now() + self.submit_retry_s
        pause = FIRST_PAUSE_S
        while True:
            try:
                r = self.request("POST", f"{V1}/jobs", body=body, headers=headers)
                return self._parse(JobsPage, r).jobs
            except ApiError as exc:
                if exc.status != 0 and exc.status < 500:
                    raise  # refused: retrying would not change the answer
                wait = pause * self._jitter.uniform(0.5, 1.0)
                if self._now() + wait > end:
                    raise
            with self._count_lock:
                self.submit_retries += 1
            self._sleep(wait)
            pause = min(MAX_PAUSE_S, pause * 2)

    def jobs_page(
        self,
        state: str | Iterable[str] | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> JobsPage:
        """One page of jobs, newest first (a non-admin: its tenant's); ``page.next`` is
        the ``cursor`` of the following page (None: the last)."""
        states = state if state is None or isinstance(state, str) else ",".join(state)
        return self._get(
            JobsPage, f"{V1}/jobs", state=states, tenant=tenant, name=name, limit=limit,
            cursor=cursor,
        )  # fmt: skip

    def jobs(
        self,
        state: str | Iterable[str] | None = None,
        *,
        tenant: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        page_size: int = 100,
    ) -> Iterator[JobOut]:
        """Jobs, newest first, fetched a page at a time as the iteration goes on; at most
        ``limit`` (None: all). ``state``: ``"running"``, ``"pending,admitted"`` or a list."""
        states = None if state is None or isinstance(state, str) else list(state)
        cursor: str | None = None
        given = 0
        while True:
            size = page_size if limit is None else max(1, min(page_size, limit - given))
            page = self.jobs_page(states if states is not None else state, tenant=tenant,
                                  name=name, limit=size, cursor=cursor)  # fmt: skip
            for job in page.jobs:
                if limit is not None and given >= limit:
                    return
                given += 1
                yield job
            if page.next is None or (limit is not None and given >= limit):
                return
            cursor = page.next

    def job(self, job: JobRef) -> JobOut:
        """One job; ApiError 404 for an unknown one (or, to a non-admin, another
        tenant's)."""
        return self._get(JobOut, f"{V1}/jobs/{_segment(_job_id(job))}")

    def cancel(self, job: JobRef) -> JobOut:
        """Cancel a job: a queued one at once, a running one once its tasks stop (the
        answer may still say ``running``). ApiError 409 if it has finished."""
        r = self.request("POST", f"{V1}/jobs/{_segment(_job_id(job))}/cancel")
        return self._parse(JobOut, r)

    def wait(self, job: JobRef, timeout: float | None = None, poll_s: float = 0.5) -> JobOut:
        """Block until the job has finished (succeeded, failed or cancelled) and return
        it; TimeoutError after ``timeout`` seconds (None: no limit). Polls, from 50 ms up
        to ``poll_s`` between calls."""
        job_id = _job_id(job)
        end = None if timeout is None else self._now() + timeout
        pause = 0.05
        while True:
            out = self.job(job_id)
            if out.finished:
                return out
            if end is not None and self._now() >= end:
                raise TimeoutError(f"job {job_id} is still {out.state} after {timeout:g} s")
            left = poll_s if end is None else max(0.0, end - self._now())
            self._sleep(min(pause, left))
            pause = min(poll_s, pause * 2)

    def events(self, job: JobRef | None = None, *, since: int = 0, limit: int = 500) -> EventsPage:
        """A job's event log (every transition with its cause), or, without ``job``, the
        cluster's after ``since`` (``page.next``: the ``since`` of the next call; a
        non-admin sees its tenant's jobs and device events without their detail)."""
        if job is not None:
            return self._get(EventsPage, f"{V1}/jobs/{_segment(_job_id(job))}/events")
        return self._get(EventsPage, f"{V1}/events", since=since, limit=limit)

    def watch_events(self, since: int = 0) -> Stream[EventOut]:
        """The cluster's events after ``since``, then each new one as it happens (the
        server-sent event stream), until the server ends the stream or the iteration
        stops. Blocks between events."""
        headers = {"Accept": "text/event-stream"}
        r = self._open_stream(f"{V1}/events", {"since": since}, headers)
        return Stream(r, sse_events(r), self.url)

    def read_log(
        self,
        job: JobRef,
        *,
        rank: int = 0,
        stream: Literal["out", "err"] = "out",
        offset: int = 0,
        attempt: int | None = None,
    ) -> LogChunk:
        """A rank's stdout (``out``) or stderr (``err``) of the latest attempt (or
        ``attempt``) from byte ``offset``: what is there now, and where to read on."""
        r = self.request(
            "GET", f"{V1}/jobs/{_segment(_job_id(job))}/logs",
            params={"rank": rank, "stream": stream, "offset": offset, "attempt": attempt},
        )  # fmt: skip
        return LogChunk(
            text=r.content.decode("utf-8", errors="replace"),
            offset=offset,
            next_offset=int(r.headers.get("x-accelnet-offset", offset + len(r.content))),
            attempt=int(r.headers.get("x-accelnet-attempt", 0)),
        )

    @overload
    def logs(
        self,
        job: JobRef,
        *,
        follow: Literal[False] = False,
        rank: int = 0,
        stream: Literal["out", "err"] = "out",
    ) -> str: ...

    @overload
    def logs(
        self,
        job: JobRef,
        *,
        follow: Literal[True],
        rank: int = 0,
        stream: Literal["out", "err"] = "out",
    ) -> Stream[str]: ...

    def logs(
        self,
        job: JobRef,
        *,
        follow: bool = False,
        rank: int = 0,
        stream: Literal["out", "err"] = "out",
    ) -> str | Stream[str]:
        """A rank's ``out`` or ``err`` text so far; with ``follow=True`` an iterator that
        yields the text as it is written until the job has finished (a retry goes on
        with the new attempt's log after a line ``[accelnet] attempt N``). ApiError 404
        for an unknown job (raised at once, also when following)."""
        if not follow:
            return self.read_log(job, rank=rank, stream=stream).text
        path = f"{V1}/jobs/{_segment(_job_id(job))}/logs"
        params = {"rank": rank, "stream": stream, "follow": "true"}
        r = self._open_stream(path, params)  # errors (404, 422) now, not at the first next()
        return Stream(r, (t for t in r.iter_text() if t), self.url)

    # -- devices ---------------------------------------------------------------------

    def devices(self) -> list[DeviceOut]:
        """Every device: lifecycle state, remediation phase, health, jobs, readings."""
        return self._get(_Devices, f"{V1}/devices").devices

    def device(self, device: str) -> DeviceOut:
        """One device (``h100box/gpu0``); ApiError 404 for an unknown one."""
        return self._get(DeviceOut, f"{V1}/devices/{_segment(device, '/')}")

    def device_op(
        self, device: str, op: str, reason: str | None = None, level: int | None = None
    ) -> DeviceOpOut:
        """``drain``, ``undrain``, ``reset`` or ``probe`` a device (admin). The server
        waits up to 10 s for the outcome: ``answer`` (None: still being carried out).
        ApiError 409 when the device refuses (a probe of a busy device)."""
        if op not in DEVICE_OPS:
            raise ValueError(f"unknown device operation {op!r}; valid: {', '.join(DEVICE_OPS)}")
        body = {k: v for k, v in (("reason", reason), ("level", level)) if v is not None}
        r = self.request("POST", f"{V1}/devices/{_segment(device, '/')}/{op}", body=body)
        return self._parse(DeviceOpOut, r)

    def drain(self, device: str, reason: str | None = None) -> DeviceOpOut:
        """Take a device out of service: no new work; its jobs finish (admin)."""
        return self.device_op(device, "drain", reason)

    def undrain(self, device: str, reason: str | None = None) -> DeviceOpOut:
        """Put a device back into service (admin)."""
        return self.device_op(device, "undrain", reason)

    def reset(self, device: str, reason: str | None = None) -> DeviceOpOut:
        """Reset and probe a device once its jobs have ended (admin)."""
        return self.device_op(device, "reset", reason)

    def probe(self, device: str, level: int = 1, reason: str | None = None) -> DeviceOpOut:
        """Probe an idle device (level 1 quick, 2 with stress); ``answer.findings``."""
        return self.device_op(device, "probe", reason, level)

    # -- fabric, tenants, policy, audit ------------------------------------------------

    def fabric(self) -> dict[str, Any]:
        """The fabric as ``accelnet.fabric/v1`` JSON (docs/json.md)."""
        data = self.request("GET", f"{V1}/fabric").json()
        if not isinstance(data, dict):
            raise ApiError(200, "bad_response", f"{self.url}{V1}/fabric: not a JSON object")
        return data

    def tenants(self) -> list[TenantOut]:
        """Tenants with weight, quota, usage and committed devices (a non-admin: its
        own)."""
        return self._get(_Tenants, f"{V1}/tenants").tenants

    def set_tenant(
        self, name: str, *, weight: float | None = None, quota: Mapping[str, float] | None = None
    ) -> TenantOut:
        """Create a tenant or change its weight and quota (admin); what is not given
        stays. ``quota``: devices per model (``"L4"``, ``"*"`` for all models)."""
        body: dict[str, Any] = {}
        if weight is not None:
            body["weight"] = weight
        if quota is not None:
            body["quota"] = dict(quota)
        r = self.request("PUT", f"{V1}/tenants/{_segment(name)}", body=body)
        return self._parse(TenantOut, r)

    def policy(self) -> PolicyOut:
        """The scheduling policy in force and the ones one may set."""
        return self._get(PolicyOut, f"{V1}/policy")

    def set_policy(
        self,
        policy: str,
        *,
        placement: str | None = None,
        round_s: float | None = None,
        min_reallocation_s: float | None = None,
    ) -> PolicyOut:
        """Decide with ``policy`` from now on (admin); queued and running jobs are kept.
        ``min_reallocation_s``: a round policy re-solves its allocation at most this often
        (default: the server's ``--min-reallocation-s``)."""
        body: dict[str, Any] = {"policy": policy}
        if placement is not None:
            body["placement"] = placement
        if round_s is not None:
            body["round_s"] = round_s
        if min_reallocation_s is not None:
            body["min_reallocation_s"] = min_reallocation_s
        return self._parse(PolicyOut, self.request("PUT", f"{V1}/policy", body=body))

    # ----- services ---------------------------------------------------------------------
    def services(self) -> list[ServiceOut]:
        """The tenant's running services (an admin: every tenant's)."""
        return self._get(_Services, f"{V1}/services").services

    def service(self, name: str, tenant: str | None = None) -> ServiceOut:
        """One service: URL, replicas, p50/p95/p99, events (``tenant``: an admin's
        choice)."""
        params = {"tenant": tenant} if tenant else {}
        return self._get(ServiceOut, f"{V1}/services/{_segment(name)}", **params)

    def create_service(self, spec: ServiceLike) -> ServiceOut:
        """Start a service from a spec (a mapping, a ``ServiceSpec``, or a YAML/JSON file,
        checked here first: ``ServiceSpecError`` names the line and key)."""
        r = self.request("POST", f"{V1}/services", body=service_dict(spec))
        return self._parse(ServiceOut, r)

    def update_service(self, spec: ServiceLike, tenant: str | None = None) -> ServiceOut:
        """Roll the service named in ``spec`` onto it (one replica at a time)."""
        body = service_dict(spec)
        name = str(body.get("name", ""))
        r = self.request("PUT", f"{V1}/services/{_segment(name)}", params={"tenant": tenant},
                         body=body)  # fmt: skip
        return self._parse(ServiceOut, r)

    def delete_service(self, name: str, tenant: str | None = None) -> ServiceOut:
        """Stop a service: its router closes and its replicas are cancelled."""
        r = self.request("DELETE", f"{V1}/services/{_segment(name)}", params={"tenant": tenant})
        return self._parse(ServiceOut, r)

    def audit(self, since: int = 0, limit: int = 500) -> AuditPage:
        """State-changing calls after ``since`` (admin): who, what, how it ended."""
        return self._get(AuditPage, f"{V1}/audit", since=since, limit=limit)


class _Services(BaseModel):
    services: list[ServiceOut]


class _Devices(BaseModel):
    devices: list[DeviceOut]


class _Tenants(BaseModel):
    tenants: list[TenantOut]
