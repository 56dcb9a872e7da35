"""Run by tests/server/test_litellm.py with the Python of LiteLLM's own virtual environment
(tests/tools/litellm.sh): every call the test checks, through both of LiteLLM's providers that
users point at an OpenAI-compatible server, printed as one JSON object. Imports neither minisgl
nor the tests: that environment has only LiteLLM.

usage: python litellm_client.py BASE_URL MODEL REQUESTS_JSON"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch from GitHub at import

import litellm  # noqa: E402


def call(provider: str, model: str, base: str, request: dict) -> dict:
    kind = request.pop("kind")
    kw = dict(model=f"{provider}/{model}", api_base=base, api_key="unused", **request)
    try:
        if kind == "text":
            resp = litellm.text_completion(**kw)
            return {"text": resp.choices[0].text, "usage": [resp.usage.prompt_tokens, resp.usage.completion_tokens]}
        if kind == "stream":
            chunks = list(litellm.completion(stream=True, stream_options={"include_usage": True}, **kw))
            usage = next((c.usage for c in chunks if getattr(c, "usage", None)), None)
            return {"content": "".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                    "usage": [usage.prompt_tokens, usage.completion_tokens] if usage else None}
        resp = litellm.completion(**kw)
        message = resp.choices[0].message
        calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []]
        return {"content": message.content, "tool_calls": calls, "finish_reason": resp.choices[0].finish_reason,
                "usage": [resp.usage.prompt_tokens, resp.usage.completion_tokens]}
    except litellm.exceptions.BadRequestError as e:
        return {"bad_request": str(e)}


def main() -> None:
    base, model, requests = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    out = {provider: {name: call(provider, model, base, dict(request)) for name, request in requests.items()}
           for provider in ("openai", "hosted_vllm")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
