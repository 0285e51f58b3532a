"""The API's routes: thin, each one calls a service of :class:`~accelnet.api.context.ApiContext`."""

from __future__ import annotations

from fastapi.responses import Response
from pydantic import BaseModel


def json_answer(body: BaseModel) -> Response:
    """``body`` as JSON, serialised once by pydantic (a route's ``response_model`` still
    documents it): FastAPI would otherwise dump, validate again and encode each answer,
    which for a page of 100 jobs costs several times what reading it does."""
    return Response(body.model_dump_json(), media_type="application/json")
