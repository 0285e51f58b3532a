"""Authentication, rate limiting and roles, as FastAPI dependencies.

Order: the token (401), then the token's rate (429 with ``Retry-After``), then the role
(403). The principal is left in ``request.state`` for the audit log. The token itself is
never logged, stored or echoed (an unknown one is "invalid or revoked", nothing more).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from accelnet.api.context import ApiContext
from accelnet.api.errors import ApiError, forbidden, unauthenticated
from accelnet.api.limits import retry_after
from accelnet.api.tokens import Principal, Role

bearer = HTTPBearer(
    auto_error=False,
    description="a token from `accelnet token create` (acn_<id>_<secret>)",
)


def context(request: Request) -> ApiContext:
    """The server's :class:`ApiContext`."""
    ctx: ApiContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ApiContext, Depends(context)]


def authenticate(
    request: Request,
    ctx: Ctx,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The caller; 401 without a valid token, 429 over its rate."""
    if creds is None:
        raise unauthenticated("missing token: send 'Authorization: Bearer <token>'")
    who = ctx.tokens.authenticate(creds.credentials)
    if who is None:
        raise unauthenticated("invalid or revoked token")
    request.state.principal = who
    wait = ctx.limiter.take(who.token_id)
    if wait > 0:
        s = ctx.settings
        raise ApiError(
            429,
            "rate_limited",
            f"too many requests for token {who.token_id}: at most {s.rate:g} per second "
            f"(bursts of {s.burst}); retry in {wait:.2f} s",
            headers={"Retry-After": retry_after(wait)},
        )
    return who


def require(role: Role) -> Callable[[Principal], Principal]:
    """A dependency: the caller, if its role is at least ``role`` (403 otherwise)."""

    def check(who: Annotated[Principal, Depends(authenticate)]) -> Principal:
        if not who.role.allows(role):
            raise forbidden(f"needs a {role.value} token; this one is {who.role.value}")
        return who

    return check


Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
User = Annotated[Principal, Depends(require(Role.USER))]
Admin = Annotated[Principal, Depends(require(Role.ADMIN))]
