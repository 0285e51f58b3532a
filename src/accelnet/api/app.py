"""The FastAPI application: routes, errors, limits, audit, and the OpenAPI document.

Layout of the server's paths (docs/api.md):

- ``/healthz``, ``/openapi.json``, ``/docs``: no token;
- ``/api/v1/...``: the API (a token on every call);
- reserved for what is mounted next to it by :func:`accelnet.api.server.build_app`:
  ``/metrics`` (Prometheus) and the dashboard (``/`` and ``/ui/...``).

Middleware, outermost first: the audit log (so refused calls are audited too), the rate
of requests without a token per client address, the fair share of each sender (requests
in progress at once), then the body size limit.
Authentication, rate limit and roles are dependencies of each route.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from accelnet.api.audit import AuditMiddleware
from accelnet.api.context import ApiContext
from accelnet.api.errors import install_error_handlers
from accelnet.api.limits import (
    AnonymousLimitMiddleware,
    BodyLimitMiddleware,
    FairShareMiddleware,
)
from accelnet.api.request_counts import RequestCountMiddleware
from accelnet.api.routers import cluster, devices, health, jobs, services
from accelnet.sched.spec import job_json_schema

API_PREFIX = "/api/v1"
DESCRIPTION = """accelnet's control plane: jobs, devices, fabric, tenants and quotas, policy,
events, audit. Send `Authorization: Bearer <token>` (from `accelnet token create`) on every
`/api/v1` call. Errors are `{"error": {"code", "message", "field"}}`."""


def _components(value: Any) -> Any:
    """JSON schema refs ``#/$defs/X`` -> ``#/components/schemas/X``."""
    if isinstance(value, dict):
        return {
            k: (v.replace("#/$defs/", "#/components/schemas/") if k == "$ref" else _components(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_components(v) for v in value]
    return value


def job_schemas(max_batch: int) -> dict[str, Any]:
    """The schemas a submission body refers to: ``JobSpec`` (with its parts) and
    ``JobBatch``."""
    schema = _components(job_json_schema())
    out: dict[str, Any] = dict(schema.pop("$defs", {}))
    out["JobSpec"] = schema
    out["JobBatch"] = {
        "title": "JobBatch",
        "type": "object",
        "properties": {
            "jobs": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/JobSpec"},
                "minItems": 1,
                "maxItems": max_batch,
            }
        },
        "required": ["jobs"],
        "additionalProperties": False,
    }
    return out


def create_app(ctx: ApiContext) -> FastAPI:
    """The application over ``ctx``."""
    app = FastAPI(
        title="accelnet",
        version=ctx.version,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.ctx = ctx
    install_error_handlers(app)
    app.include_router(health.router)
    for r in (jobs.router, devices.router, services.router, cluster.router):
        app.include_router(r, prefix=API_PREFIX)
    app.add_middleware(BodyLimitMiddleware, max_bytes=ctx.settings.max_body)
    app.add_middleware(FairShareMiddleware, limit=ctx.settings.per_sender)
    app.add_middleware(AnonymousLimitMiddleware, limiter=ctx.anon_limiter)
    app.add_middleware(AuditMiddleware, audit=ctx.audit, clock=ctx.clock)
    app.add_middleware(RequestCountMiddleware, counts=ctx.requests)  # outermost: every answer

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in job_schemas(ctx.settings.max_batch).items():
                schemas.setdefault(name, schema)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
