"""``/api/v1/devices``: list, get; drain, undrain, reset, probe (admin).

A device id holds a slash (``h100box/gpu0``): send it as is or URL-encoded
(``h100box%2Fgpu0``); both reach the same device.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from accelnet.api.deps import Admin, Ctx, Viewer
from accelnet.api.models import (
    CONFLICT,
    ERRORS,
    NOT_FOUND,
    DeviceOpIn,
    DeviceOpOut,
    DeviceOut,
    DevicesOut,
)
from accelnet.api.tokens import Principal

router = APIRouter(prefix="/devices", tags=["devices"], responses=ERRORS)
DeviceId = Annotated[str, Path(min_length=1, max_length=256, description="e.g. host/gpu0")]
OP = NOT_FOUND | CONFLICT


@router.get("", response_model=DevicesOut)
def list_devices(ctx: Ctx, who: Viewer) -> DevicesOut:
    """Every device: state, phase, health, jobs, latest telemetry."""
    return DevicesOut(devices=ctx.devices.list(who))


@router.get("/{device_id:path}", response_model=DeviceOut, responses=NOT_FOUND)
def get_device(ctx: Ctx, who: Viewer, device_id: DeviceId) -> DeviceOut:
    """One device."""
    return ctx.devices.get(who, device_id)


def _operate(
    request: Request, ctx: Ctx, who: Principal, device: str, op: str, body: DeviceOpIn | None
) -> DeviceOpOut:
    body = body or DeviceOpIn()
    request.state.audit_detail = f"{op} {device}"
    out = ctx.devices.operate(who, device, op, body.reason, body.level)
    if out.answer is not None:
        request.state.audit_detail += f": {out.answer.detail}"[:500]
    return out


@router.post("/{device_id:path}/drain", status_code=202, response_model=DeviceOpOut, responses=OP)
def drain(
    request: Request, ctx: Ctx, who: Admin, device_id: DeviceId, body: DeviceOpIn | None = None
) -> DeviceOpOut:
    """Take the device out of service: no new work; its jobs finish."""
    return _operate(request, ctx, who, device_id, "drain", body)


@router.post("/{device_id:path}/undrain", status_code=202, response_model=DeviceOpOut, responses=OP)
def undrain(
    request: Request, ctx: Ctx, who: Admin, device_id: DeviceId, body: DeviceOpIn | None = None
) -> DeviceOpOut:
    """Back into service (refreshed and probed first if idle)."""
    return _operate(request, ctx, who, device_id, "undrain", body)


@router.post("/{device_id:path}/reset", status_code=202, response_model=DeviceOpOut, responses=OP)
def reset(
    request: Request, ctx: Ctx, who: Admin, device_id: DeviceId, body: DeviceOpIn | None = None
) -> DeviceOpOut:
    """Reset and probe the device (after its jobs end)."""
    return _operate(request, ctx, who, device_id, "reset", body)


@router.post("/{device_id:path}/probe", status_code=202, response_model=DeviceOpOut, responses=OP)
def probe(
    request: Request, ctx: Ctx, who: Admin, device_id: DeviceId, body: DeviceOpIn | None = None
) -> DeviceOpOut:
    """Probe an idle device (``level`` 1 or 2); the answer holds the findings."""
    return _operate(request, ctx, who, device_id, "probe", body)
