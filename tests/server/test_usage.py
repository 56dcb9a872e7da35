"""usage.prompt_tokens_details.cached_tokens (chat, completions, streamed or not) and the
Responses API's input_tokens_details.cached_tokens report each request's prefix-cache hit, read
with the official openai client: nothing on a first prompt, most of it when the same prompt comes
again, and exactly what the scheduler counted in minisgl_prefix_cache_hits_total."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.server.serving import tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
PAGE = 4
# The arguments of test_prompt_logprobs.py and test_structured_output.py: the three modules share one server.
model_dir, server, client = tiny_qwen3_server("--served-model-name", MODEL, "--dtype", "float32", "--page-size",
                                              str(PAGE), "--num-pages", "2048", "--max-seq-len", "512")
LONG = "You are a careful assistant who answers in one sentence. " * 4


def prefix_hits(server) -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return float(re.search(r'^minisgl_prefix_cache_hits_total\{model_name="tiny-qwen3"\} (\S+)$', text, re.M).group(1))


def wait_for_hits(server, want: float) -> float:
    deadline = time.monotonic() + 10  # the scheduler reports a few times a second
    while (got := prefix_hits(server)) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def test_a_repeated_prompt_reports_its_cached_prefix_in_every_api(client, server):
    before = prefix_hits(server)
    common = {"model": MODEL, "max_tokens": 3, "temperature": 0}
    first = client.completions.create(prompt=LONG + "Question A?", **common).usage
    assert first.prompt_tokens_details.cached_tokens == 0
    again = client.completions.create(prompt=LONG + "Question A?", **common).usage
    # Whole pages of the prompt are shared; the last token is always computed again.
    assert again.prompt_tokens - PAGE <= again.prompt_tokens_details.cached_tokens < again.prompt_tokens
    assert again.prompt_tokens_details.cached_tokens % PAGE == 0

    messages = [{"role": "user", "content": LONG + "Question B?"}]
    chat = [client.chat.completions.create(messages=messages, **common).usage for _ in range(2)]
    stream = client.chat.completions.create(messages=messages, stream=True, stream_options={"include_usage": True},
                                            **common)
    streamed = [c for c in stream][-1].usage
    assert chat[0].prompt_tokens_details.cached_tokens < chat[1].prompt_tokens_details.cached_tokens
    assert chat[1].prompt_tokens - PAGE <= chat[1].prompt_tokens_details.cached_tokens < chat[1].prompt_tokens
    assert streamed.prompt_tokens_details.cached_tokens == chat[1].prompt_tokens_details.cached_tokens

    response = client.responses.create(model=MODEL, input=messages, max_output_tokens=3)
    assert response.usage.input_tokens_details.cached_tokens == chat[1].prompt_tokens_details.cached_tokens

    reported = [u.prompt_tokens_details.cached_tokens for u in (first, again, *chat, streamed)]
    reported.append(response.usage.input_tokens_details.cached_tokens)
    assert wait_for_hits(server, before + sum(reported)) == before + sum(reported)
