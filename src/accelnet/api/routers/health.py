"""``GET /healthz``: no token needed."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from accelnet.api.deps import Ctx
from accelnet.api.models import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
def healthz(ctx: Ctx) -> JSONResponse:
    """``ok`` while the controller runs; ``degraded`` (503) if it has stopped."""
    alive = ctx.port.alive()
    body = Health(status="ok" if alive else "degraded", version=ctx.version, controller=alive)
    return JSONResponse(body.model_dump(), status_code=200 if alive else 503)
