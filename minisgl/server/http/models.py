"""GET /v1/models: the one model this server serves, under each of its names."""

from __future__ import annotations

from fastapi import APIRouter

from .deps import ApiDeps
from .protocol import ModelList


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()
    args, state = deps.args, deps.state

    @api.get("/v1/models", tags=["openai"], response_model=ModelList)
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": state.created,
                                            "owned_by": "minisgl", "root": args.model or args.model_name}
                                           for name in args.model_names]}

    return api
