"""``/api/v1``: fabric, tenants, policy, events, audit, whoami."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from accelnet.api.deps import Admin, Ctx, Viewer
from accelnet.api.models import (
    ERRORS,
    AuditOut,
    EventsOut,
    PolicyIn,
    PolicyOut,
    TenantIn,
    TenantOut,
    TenantsOut,
    WhoAmI,
)
from accelnet.api.routers import json_answer
from accelnet.api.streams import event_stream
from accelnet.api.tokens import NAME_PATTERN
from accelnet.fabric.export import fabric_to_json

router = APIRouter(responses=ERRORS)
MAX_SEQ = 2**62
Since = Annotated[int, Query(ge=0, le=MAX_SEQ, description="the last sequence number seen")]
SSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "JSON; or, with Accept: text/event-stream, a live event stream",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


@router.get("/whoami", response_model=WhoAmI, tags=["tokens"])
def whoami(who: Viewer) -> WhoAmI:
    """The caller's token: id, tenant, role, name."""
    return WhoAmI(token_id=who.token_id, tenant=who.tenant, role=who.role.value, name=who.name)


@router.get("/fabric", tags=["fabric"])
def fabric(ctx: Ctx, who: Viewer) -> dict[str, Any]:
    """The fabric: hosts, devices, switches, links (``accelnet.fabric/v1``, docs/json.md)."""
    return fabric_to_json(ctx.port.fabric)


@router.get("/tenants", response_model=TenantsOut, tags=["tenants"])
def list_tenants(ctx: Ctx, who: Viewer) -> TenantsOut:
    """Tenants with weight, quota and use (a non-admin: its own)."""
    return TenantsOut(tenants=ctx.control.list_tenants(who))


@router.put("/tenants/{name}", response_model=TenantOut, tags=["tenants"])
def put_tenant(
    request: Request,
    ctx: Ctx,
    who: Admin,
    name: Annotated[str, Path(pattern=NAME_PATTERN, max_length=64)],
    body: TenantIn,
) -> TenantOut:
    """Create a tenant or change its weight and quota (checked at the next admission;
    the scheduler applies them from its next decision)."""
    request.state.audit_detail = f"tenant {name}: {body.model_dump(exclude_none=True)}"[:500]
    return ctx.control.put_tenant(name, body)


@router.get("/policy", response_model=PolicyOut, tags=["policy"])
def get_policy(ctx: Ctx, who: Viewer) -> PolicyOut:
    """The scheduling policy in force, and the ones one may set."""
    return ctx.control.policy()


@router.put("/policy", response_model=PolicyOut, tags=["policy"])
def put_policy(request: Request, ctx: Ctx, who: Admin, body: PolicyIn) -> PolicyOut:
    """Decide with another policy from now on (queued and running jobs are kept)."""
    request.state.audit_detail = f"policy {body.model_dump(exclude_none=True)}"[:500]
    return ctx.control.set_policy(body)


@router.get("/events", response_model=EventsOut, tags=["events"], responses=SSE)
def events(
    ctx: Ctx,
    who: Viewer,
    since: Since = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    accept: Annotated[str | None, Header(max_length=1024)] = None,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> Any:
    """The cluster event log after ``since`` (device and job events; a non-admin sees its
    tenant's jobs' events and device events without their detail). With ``Accept:
    text/event-stream``: server-sent events, live (``Last-Event-ID`` resumes)."""
    if accept is not None and "text/event-stream" in accept:
        if last_event_id is not None and last_event_id.isdigit():
            since = max(since, min(int(last_event_id), MAX_SEQ))
        return StreamingResponse(
            event_stream(ctx, who, since),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return json_answer(ctx.control.events(who, since, limit))


@router.get("/audit", response_model=AuditOut, tags=["audit"])
def audit(
    ctx: Ctx,
    who: Admin,
    since: Since = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> Response:
    """Every state-changing call: who (token id, tenant, role), what, how it ended."""
    return json_answer(ctx.control.audit(since, limit))
