"""``/api/v1/services``: start, list, get, update (rolling), stop a service."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Path, Query, Request

from accelnet.api.deps import Ctx, User, Viewer
from accelnet.api.models import CONFLICT, ERRORS, NOT_FOUND, ServiceOut, ServicesOut

router = APIRouter(prefix="/services", tags=["services"], responses=ERRORS)
Name = Annotated[str, Path(pattern=r"^[\w][\w.-]*$", max_length=100,
                           description="the service's name")]  # fmt: skip
Owner = Annotated[str | None, Query(pattern=r"^[\w][\w.-]*$", max_length=64,
                                    description="the owning tenant (an admin's choice; "
                                                "default: the token's)")]  # fmt: skip
SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "a service spec (docs/serve.md)",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


@router.post("", status_code=201, response_model=ServiceOut, openapi_extra=SPEC_BODY,
             responses={409: CONFLICT[409] | {"description": "a service of that name runs"},
                        422: ERRORS[422] | {"description": "invalid or too_many"}})  # fmt: skip
async def create_service(request: Request, ctx: Ctx, who: User) -> ServiceOut:
    """Start a service for the token's tenant (an admin may set ``tenant``): its router
    and its first replicas, which are jobs of that tenant. 422 names the bad field; 409
    if the tenant runs a service of that name (update it with PUT)."""
    raw = await request.body()
    out: ServiceOut = await anyio.to_thread.run_sync(ctx.services.create, who, raw)
    request.state.audit_detail = f"service {out.tenant}/{out.name}"
    return out


@router.get("", response_model=ServicesOut)
def list_services(ctx: Ctx, who: Viewer) -> ServicesOut:
    """The tenant's services (an admin: all), with their replicas and figures."""
    return ServicesOut(services=ctx.services.visible(who))


@router.get("/{name}", response_model=ServiceOut, responses=NOT_FOUND)
def get_service(ctx: Ctx, who: Viewer, name: Name, tenant: Owner = None) -> ServiceOut:
    """One service: its URL, replicas (job, device model, ready), p50/p95/p99, events."""
    return ctx.services.get(who, name, tenant)


@router.put("/{name}", response_model=ServiceOut, openapi_extra=SPEC_BODY, responses=NOT_FOUND)
async def update_service(
    request: Request, ctx: Ctx, who: User, name: Name, tenant: Owner = None
) -> ServiceOut:
    """Roll the service onto a new spec (same name): one new replica at a time, an old one
    leaves once a new one is ready; no request is cut."""
    raw = await request.body()
    out: ServiceOut = await anyio.to_thread.run_sync(ctx.services.update, who, name, tenant, raw)
    request.state.audit_detail = f"service {out.tenant}/{out.name} to version {out.version}"
    return out


@router.delete("/{name}", response_model=ServiceOut, responses=NOT_FOUND)
async def delete_service(
    request: Request, ctx: Ctx, who: User, name: Name, tenant: Owner = None
) -> ServiceOut:
    """Stop the service: its router closes, its replica jobs are cancelled."""
    out: ServiceOut = await anyio.to_thread.run_sync(ctx.services.delete, who, name, tenant)
    request.state.audit_detail = f"service {out.tenant}/{out.name} stopped"
    return out
