"""GET /v1/models and /v1/models/{id}: the one model this server serves, under each of its names,
and its LoRA adapters (--lora-modules), each with the base model as its `parent`, as vLLM lists
them; every card carries `max_model_len`, which clients use to size their context."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel

from .deps import ApiDeps, clipped
from .protocol import APIError


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str
    parent: str | None = None  # a LoRA adapter's base model
    max_model_len: int | None = None  # prompt plus output tokens a request may have (vLLM's field)


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()
    args, state = deps.args, deps.state

    def cards() -> list[dict]:
        card = {"object": "model", "created": state.created, "owned_by": "minisgl", "max_model_len": args.max_seq_len}
        base = [{"id": name, **card, "root": args.model or args.model_name} for name in args.model_names]
        adapters = [{"id": name, **card, "root": path, "parent": args.model_name}
                    for name, path in deps.loras.served.items()]
        return base + adapters

    @api.get("/v1/models", tags=["openai"], response_model=ModelList)
    async def models():
        return {"object": "list", "data": cards()}

    # `:path`: a served name may hold slashes (a Hub id such as Qwen/Qwen3-0.6B).
    @api.get("/v1/models/{model_id:path}", tags=["openai"], response_model=ModelCard)
    async def model(model_id: str):
        found = next((card for card in cards() if card["id"] == model_id), None)
        if found is None:
            raise APIError(404, f"The model {clipped(model_id)!r} does not exist: this server serves "
                           f"{', '.join(repr(c['id']) for c in cards())}", param="model", code="model_not_found")
        return found

    return api
