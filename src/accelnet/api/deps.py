"""Authentication, rate limiting and roles, as FastAPI dependencies.

Order: the token (401; or 429 with ``Retry-After`` once the client address has sent too
many requests without a valid token, :mod:`accelnet.api.limits`), then the token's rate
(429 with ``Retry-After``), then the role (403). The principal is left in
``request.state`` for the audit log. The token itself is never logged, stored or echoed
(an unknown one is "invalid or revoked", nothing more).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, NoReturn

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from accelnet.api.audit import client_address
from accelnet.api.context import ApiContext
from accelnet.api.errors import ApiError, forbidden, unauthenticated
from accelnet.api.limits import ANON_SPENT, retry_after, without_token_message
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
    """The caller; 401 without a valid token (429 past the address's rate of those),
    429 over its token's rate."""
    if creds is None:
        _refuse(request, ctx, "missing token: send 'Authorization: Bearer <token>'")
    who = ctx.tokens.authenticate(creds.credentials)
    if who is None:
        _refuse(request, ctx, "invalid or revoked token")
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


def _refuse(request: Request, ctx: ApiContext, message: str) -> NoReturn:
    """401 ``message``; 429 instead if the client's address has no request left without
    a valid token (one is spent here unless the request spent one already)."""
    limiter = ctx.anon_limiter
    if not getattr(request.state, ANON_SPENT, False) and limiter.rate > 0:
        address = client_address(request.scope)
        wait = limiter.take(address)
        if wait > 0:
            raise ApiError(
                429,
                "rate_limited",
                without_token_message(limiter, address, wait),
                headers={"Retry-After": retry_after(wait)},
            )
    raise unauthenticated(message)


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
