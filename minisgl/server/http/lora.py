"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's names and bodies): LoRA adapters
loaded and unloaded while serving, only with --allow-runtime-lora-updating (without it the routes do
not exist). A load is read off the scheduler's loop and installed between two steps, so decoding
goes on around it; its route returns once requests may name the adapter (until then they get the
404 of an unknown model), or with the reason it cannot be served (400). An adapter in use is never
unloaded (400 with the count), nor one still loading (400). The names the API answers to change
with them, and so do /metrics' lora_name labels: an unloaded adapter's series go with it, and a name
is at most MAX_LORA_NAME characters, so load/unload cycles cannot grow /metrics without bound."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from pydantic import Field

from ..runtime.frontend import UNAVAILABLE
from .deps import ApiDeps
from .protocol import APIError, StrictBody

MAX_LORA_NAME = 128  # a name is a model id and a metrics label value


class LoadLoraAdapterRequest(StrictBody):
    lora_name: str = Field(min_length=1, max_length=MAX_LORA_NAME)
    lora_path: str = Field(max_length=4096)


class UnloadLoraAdapterRequest(StrictBody):
    lora_name: str
    lora_int_id: int | None = None  # vLLM's clients may send it; the name decides


def router(deps: ApiDeps) -> APIRouter:
    api = APIRouter()
    if not deps.args.allow_runtime_lora_updating:
        return api

    async def update(name: str, path: str | None) -> None:
        reply = await deps.frontend.update_lora(name, path)
        if reply.finish_reason == UNAVAILABLE:
            raise APIError(503, reply.error or "the server cannot take requests", code="service_unavailable")
        if reply.finish_reason != "stop":
            raise APIError(400, reply.error or "failed", param="lora_name", code="invalid_request")

    @api.post("/v1/load_lora_adapter", tags=["lora"], response_class=PlainTextResponse)
    async def load(body: LoadLoraAdapterRequest):
        deps.check_serving()
        name = body.lora_name
        if name in deps.loras.served or name in deps.args.model_names:
            raise APIError(400, f"the LoRA adapter '{name}' has already been loaded", param="lora_name",
                           code="invalid_request")
        if name in deps.loras.loading:
            raise APIError(400, f"the LoRA adapter '{name}' is already being loaded", param="lora_name",
                           code="invalid_request")

        async def load_and_serve() -> None:
            deps.loras.loading.add(name)
            try:
                await update(name, body.lora_path)
            finally:
                deps.loras.loading.discard(name)
            deps.loras.served[name] = body.lora_path

        # Shielded: the scheduler installs the adapter whether or not the client waits for it, so
        # the API must serve it then too (else its slot would be held by a name nobody can use).
        await asyncio.shield(load_and_serve())
        return f"Success: LoRA adapter '{body.lora_name}' added successfully."

    @api.post("/v1/unload_lora_adapter", tags=["lora"], response_class=PlainTextResponse)
    async def unload(body: UnloadLoraAdapterRequest):
        deps.check_serving()
        if body.lora_name in deps.loras.loading:
            raise APIError(400, f"the LoRA adapter '{body.lora_name}' is still loading; unload it once its load has "
                           "finished", param="lora_name", code="invalid_request")
        if body.lora_name not in deps.loras.served:
            raise APIError(404, f"the LoRA adapter '{body.lora_name}' cannot be found", param="lora_name",
                           code="model_not_found")
        await update(body.lora_name, None)
        del deps.loras.served[body.lora_name]
        try:
            deps.metrics.lora_requests.remove(deps.metrics.model_name, body.lora_name)
        except KeyError:  # never served a request
            pass
        return f"Success: LoRA adapter '{body.lora_name}' removed successfully."

    return api
