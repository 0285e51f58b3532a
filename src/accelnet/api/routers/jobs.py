"""``/api/v1/jobs``: submit, list, get, cancel, events, logs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from accelnet.api.admission import KEY_HEADER
from accelnet.api.deps import Ctx, User, Viewer
from accelnet.api.jobs import MAX_LIMIT
from accelnet.api.models import (
    CONFLICT,
    ERRORS,
    NOT_FOUND,
    EventsOut,
    JobOut,
    JobsOut,
    SubmittedOut,
)
from accelnet.api.routers import json_answer
from accelnet.api.streams import follow_log

router = APIRouter(prefix="/jobs", tags=["jobs"], responses=ERRORS)
JobId = Annotated[str, Path(min_length=1, max_length=256, description="the job's id")]
MAX_OFFSET = 2**53
SUBMIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": 'a job spec (docs/job-spec.md), or {"jobs": [spec, ...]}',
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [
                        {"$ref": "#/components/schemas/JobSpec"},
                        {"$ref": "#/components/schemas/JobBatch"},
                    ]
                }
            }
        },
    }
}
KEY_TEXT = (
    "a key of the client's choosing (a UUID), 1 to 255 characters: the same key again "
    "within 24 h answers the jobs the first request made instead of making new ones"
)
LOG_TEXT: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the stream's bytes from offset (X-Accelnet-Offset: where to go on)",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


@router.post(
    "",
    status_code=201,
    response_model=SubmittedOut,
    openapi_extra=SUBMIT_BODY,
    responses={
        409: CONFLICT[409] | {"description": "the Idempotency-Key came with another body"},
        422: ERRORS[422] | {"description": "invalid or over_quota"},
    },
)
async def submit(
    request: Request,
    response: Response,
    ctx: Ctx,
    who: User,
    idempotency_key: Annotated[str | None, Header(alias=KEY_HEADER, description=KEY_TEXT)] = None,
) -> SubmittedOut:
    """Submit one job, or several (``{"jobs": [...]}``, all or none). The token's tenant
    is the jobs' tenant (an admin may set ``tenant``). 422 ``invalid`` names the field;
    422 ``over_quota`` names the tenant, the model, the quota and the use. With an
    ``Idempotency-Key``, a retry of the same request answers the jobs the first one made
    (``Idempotent-Replayed: true``); 409 if that key came with another body."""
    raw = await request.body()
    jobs, replayed = await anyio.to_thread.run_sync(ctx.jobs.submit, who, raw, idempotency_key)
    ids = ", ".join(j.id for j in jobs)
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    request.state.audit_detail = ("replayed " if replayed else "submitted ") + ids
    return SubmittedOut(jobs=jobs)


@router.get("", response_model=JobsOut)
def list_jobs(
    ctx: Ctx,
    who: Viewer,
    state: Annotated[
        str | None, Query(max_length=256, description="states, comma-separated")
    ] = None,
    tenant: Annotated[str | None, Query(max_length=64)] = None,
    name: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    cursor: Annotated[
        str | None, Query(max_length=1024, description="`next` of the previous page")
    ] = None,
) -> Response:
    """Jobs, newest first (a non-admin: its tenant's)."""
    return json_answer(ctx.jobs.list(who, state, tenant, name, limit, cursor))


@router.get("/{job_id}", response_model=JobOut, responses=NOT_FOUND)
def get_job(ctx: Ctx, who: Viewer, job_id: JobId) -> JobOut:
    """One job (404 for another tenant's, to a non-admin)."""
    return ctx.jobs.out(ctx.jobs.find(who, job_id))


@router.post(
    "/{job_id}/cancel", status_code=202, response_model=JobOut, responses=NOT_FOUND | CONFLICT
)
def cancel_job(request: Request, ctx: Ctx, who: User, job_id: JobId) -> JobOut:
    """Cancel a job: a queued one at once, a running one once its tasks stop (409 if it
    has finished)."""
    out = ctx.jobs.cancel(who, job_id)
    request.state.audit_detail = f"cancel {job_id}"
    return out


@router.get("/{job_id}/events", response_model=EventsOut, responses=NOT_FOUND)
def job_events(ctx: Ctx, who: Viewer, job_id: JobId) -> Response:
    """The job's event log: its transitions with their causes, its tasks' news."""
    return json_answer(ctx.jobs.events(who, job_id))


@router.get("/{job_id}/logs", response_class=Response, responses=NOT_FOUND | LOG_TEXT)
async def job_logs(
    ctx: Ctx,
    who: Viewer,
    job_id: JobId,
    rank: Annotated[int, Query(ge=0, le=65535)] = 0,
    stream: Literal["out", "err"] = "out",
    follow: bool = False,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="bytes to skip")] = 0,
    attempt: Annotated[
        int | None, Query(ge=1, le=1_000_000, description="default: the latest")
    ] = None,
) -> Response:
    """A rank's stdout or stderr (of the latest attempt), from ``offset``; ``follow``
    streams it as it grows until the job has finished."""
    chunk = await anyio.to_thread.run_sync(
        lambda: ctx.jobs.read_log(who, job_id, rank, stream, offset, attempt)
    )
    if follow and attempt is None:
        return StreamingResponse(
            follow_log(ctx, who, job_id, rank, stream, offset),
            media_type="text/plain; charset=utf-8",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return Response(
        chunk.data,
        media_type="text/plain; charset=utf-8",
        headers={
            "X-Accelnet-Offset": str(chunk.next_offset),
            "X-Accelnet-Attempt": str(chunk.attempt),
        },
    )
