"""GET /v1/models: the one model this server serves, under each of its names, and its LoRA adapters
(--lora-modules), each with the base model as its `parent`, as vLLM lists them."""

from __future__ import annotations

from fastapi import APIRouter

from .deps import ApiDeps
from .protocol import ModelList


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()
    args, state = deps.args, deps.state

    @api.get("/v1/models", tags=["openai"], response_model=ModelList)
    async def models():
        card = {"object": "model", "created": state.created, "owned_by": "minisgl"}
        base = [{"id": name, **card, "root": args.model or args.model_name} for name in args.model_names]
        adapters = [{"id": name, **card, "root": path, "parent": args.model_name}
                    for name, path in deps.adapters.items()]
        return {"object": "list", "data": base + adapters}

    return api
