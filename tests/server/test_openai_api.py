"""The real server, driven with the official `openai` client: chat, completions, streaming,
stop strings, usage, concurrency and bad input, all checked against minisgl's offline LLM and the
model's tokenizer."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
import torch
from transformers import AutoTokenizer

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.server.serving import tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
SERVER_ARGS = ["--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", "4096",
               "--max-running-requests", "64", "--max-seq-len", "512"]


model_dir, server, client = tiny_qwen3_server(*SERVER_ARGS)


@pytest.fixture(scope="module")
def reference(model_dir):
    """Greedy ids and text from the offline LLM (same scheduler and engine, no server)."""
    llm = LLM(model_dir, device="cpu", dtype=torch.float32, num_pages=1024, page_size=4)
    tok = AutoTokenizer.from_pretrained(model_dir)

    def run(prompt_ids: list[int], max_tokens: int) -> tuple[list[int], str]:
        out = llm.generate([prompt_ids], SamplingParams(temperature=0, max_tokens=max_tokens), use_tqdm=False)[0]
        return out["token_ids"], tok.decode(out["token_ids"], skip_special_tokens=True)

    yield run, tok
    llm.shutdown()


def chat_ids(tok, messages) -> list[int]:
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is a radix tree?"}]


def test_models_lists_the_served_name(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_chat_matches_offline_generation_and_counts_usage(client, reference):
    run, tok = reference
    want_ids, want_text = run(chat_ids(tok, MESSAGES), 20)
    resp = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=20, temperature=0)
    assert resp.choices[0].message.content == want_text
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].finish_reason == ("length" if len(want_ids) == 20 else "stop")
    assert resp.usage.prompt_tokens == len(chat_ids(tok, MESSAGES))
    assert resp.usage.completion_tokens == len(want_ids)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_streamed_chat_equals_non_streamed(client):
    kwargs = dict(model=MODEL, messages=MESSAGES, max_completion_tokens=30, temperature=0)
    full = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_completions_with_text_and_token_ids(client, reference):
    run, tok = reference
    ids = tok.encode("The quick brown fox")
    want_ids, want_text = run(ids, 12)
    by_text = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=12, temperature=0)
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=12, temperature=0)
    assert by_text.choices[0].text == by_ids.choices[0].text == want_text
    assert by_text.usage.prompt_tokens == len(ids) and by_text.usage.completion_tokens == len(want_ids)
    streamed = client.completions.create(model=MODEL, prompt=ids, max_tokens=12, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == want_text


def test_completion_batch_and_n(client):
    resp = client.completions.create(model=MODEL, prompt=["Hello", "Paris"], max_tokens=5, temperature=0, n=2)
    assert sorted(c.index for c in resp.choices) == [0, 1, 2, 3]
    by_index = {c.index: c.text for c in resp.choices}
    assert by_index[0] == by_index[1] and by_index[2] == by_index[3]  # greedy: n copies agree
    assert resp.usage.prompt_tokens == 2 * 0 + resp.usage.prompt_tokens  # counted per prompt, not per copy
    single = client.completions.create(model=MODEL, prompt="Hello", max_tokens=5, temperature=0)
    assert by_index[0] == single.choices[0].text


def test_stop_strings_end_generation_and_are_not_emitted(client, reference):
    run, tok = reference
    ids = list(range(30, 60))
    _, text = run(ids, 40)
    printable = [i for i in range(4, len(text) - 3) if text[i : i + 3].isprintable() and "\ufffd" not in text[i : i + 3]]
    assert printable, f"no usable stop string in {text!r}"
    cut = printable[len(printable) // 2]
    stop = text[cut : cut + 3]
    expected = text[: text.find(stop)]
    resp = client.completions.create(model=MODEL, prompt=ids, max_tokens=40, temperature=0, stop=[stop, "\x00never"])
    assert resp.choices[0].text == expected
    assert resp.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model=MODEL, prompt=ids, max_tokens=40, temperature=0, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == expected


def test_sampling_with_seed_is_reproducible(client):
    kwargs = dict(model=MODEL, prompt="Hello", max_tokens=16, temperature=1.0, top_p=0.9, seed=7)
    a = client.completions.create(**kwargs).choices[0].text
    b = client.completions.create(**kwargs).choices[0].text
    assert a == b


def test_n_seeded_choices_differ_from_each_other_and_reproduce(client):
    kwargs = dict(model=MODEL, prompt="Hello", max_tokens=16, temperature=1.0, seed=7, n=3)
    first = [c.text for c in sorted(client.completions.create(**kwargs).choices, key=lambda c: c.index)]
    again = [c.text for c in sorted(client.completions.create(**kwargs).choices, key=lambda c: c.index)]
    assert first == again
    assert len(set(first)) == 3


def test_completion_logprobs_are_consistent_and_equal_when_streamed(client):
    kwargs = dict(model=MODEL, prompt=[5, 17, 42, 99], max_tokens=6, temperature=0, logprobs=2,
                  extra_body={"ignore_eos": True})
    resp = client.completions.create(**kwargs)
    lp = resp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == resp.usage.completion_tokens == 6
    assert "".join(lp.tokens) == resp.choices[0].text
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) <= 2 and value <= 0
        # Greedy: the most likely token. (Alternatives are keyed by text, so tokens that decode alike,
        # e.g. partial UTF-8 bytes, share one entry: the top one may not be listed.)
        assert value >= max(top.values()) - 1e-6
    streamed = [c.choices[0].logprobs for c in client.completions.create(**kwargs, stream=True) if c.choices]
    assert [v for piece in streamed if piece for v in piece.token_logprobs] == pytest.approx(lp.token_logprobs)
    assert [at for piece in streamed if piece for at in piece.text_offset] == lp.text_offset
    assert client.completions.create(**{**kwargs, "logprobs": None}).choices[0].logprobs is None


def test_chat_logprobs_with_top_alternatives(client):
    resp = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=5, temperature=0, logprobs=True,
                                          top_logprobs=3, extra_body={"ignore_eos": True})
    content = resp.choices[0].logprobs.content
    assert len(content) == resp.usage.completion_tokens == 5
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.bytes == list(entry.token.encode("utf-8", "surrogatepass"))
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob, abs=1e-6)
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)
    with pytest.raises(openai.BadRequestError, match="top_logprobs requires logprobs"):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, top_logprobs=2)


def test_streamed_chat_choices_open_with_the_role_and_carry_the_same_logprobs(client):
    kwargs = dict(model=MODEL, messages=MESSAGES, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2, n=2,
                  extra_body={"ignore_eos": True})
    full = client.chat.completions.create(**kwargs)
    chunks = [c for c in client.chat.completions.create(stream=True, **kwargs) if c.choices]
    assert [(c.choices[0].index, c.choices[0].delta.role) for c in chunks[:2]] == [(0, "assistant"), (1, "assistant")]
    for choice in full.choices:
        mine = [c.choices[0] for c in chunks if c.choices[0].index == choice.index]
        streamed = [entry for piece in mine if piece.logprobs for entry in piece.logprobs.content]
        assert [e.token for e in streamed] == [e.token for e in choice.logprobs.content]
        # approx: the two runs batch differently, and float32 sums depend on the batch
        assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in choice.logprobs.content], abs=1e-4)
        assert [[t.token for t in e.top_logprobs] for e in streamed] == \
            [[t.token for t in e.top_logprobs] for e in choice.logprobs.content]
        assert "".join(piece.delta.content or "" for piece in mine) == choice.message.content
        assert [piece.finish_reason for piece in mine if piece.finish_reason] == [choice.finish_reason]


def test_a_single_stop_string_may_be_longer_than_four_characters(client):
    resp = client.completions.create(model=MODEL, prompt="Hello", max_tokens=4, stop="\n\nHuman:")
    assert resp.choices[0].finish_reason in ("stop", "length")


def test_32_concurrent_streams_all_complete(server, reference):
    run, tok = reference
    prompts = [[5 + i, 17, 42 + i, 99] for i in range(32)]
    wanted = [run(p, 24)[1] for p in prompts]

    async def one(aclient, prompt):
        stream = await aclient.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0, stream=True)
        return "".join([c.choices[0].text async for c in stream])

    async def main():
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused")
        return await asyncio.gather(*(one(aclient, p) for p in prompts))

    assert asyncio.run(main()) == wanted


BAD_REQUESTS = [
    ("malformed JSON", "/v1/chat/completions", b"{not json", 400),
    ("missing messages", "/v1/chat/completions", {"model": MODEL}, 400),
    ("empty messages", "/v1/chat/completions", {"model": MODEL, "messages": []}, 400),
    ("wrong type", "/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "max_tokens": "many"}, 400),
    ("max_tokens < 1", "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 0}, 400),
    ("temperature < 0", "/v1/completions", {"model": MODEL, "prompt": "hi", "temperature": -1}, 400),
    # Bounded cost per request: a stop string is matched against every new piece of text.
    ("stop string too long", "/v1/completions", {"model": MODEL, "prompt": "hi", "stop": "q" * 1025}, 400),
    ("stop list item too long", "/v1/completions", {"model": MODEL, "prompt": "hi", "stop": ["a", "q" * 1025]}, 400),
    ("too many stop_token_ids", "/v1/completions", {"model": MODEL, "prompt": "hi",
                                                     "stop_token_ids": list(range(1025))}, 400),
    ("bad role", "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400),
    ("prompt too long", "/v1/completions", {"model": MODEL, "prompt": [7] * 600, "max_tokens": 5}, 400),
    ("prompt + max_tokens too long", "/v1/completions", {"model": MODEL, "prompt": [7] * 500, "max_tokens": 50}, 400),
    ("token id out of vocabulary", "/v1/completions", {"model": MODEL, "prompt": [10**6], "max_tokens": 5}, 400),
    ("unknown model", "/v1/completions", {"model": "gpt-17", "prompt": "hi"}, 404),
    ("no such route", "/v1/embeddings", {"model": MODEL, "input": "hi"}, 404),
    ("model name with a lone surrogate", "/v1/completions", b'{"model": "\\ud800", "prompt": "hi"}', 404),
    ("top_k beyond int32", "/v1/completions", {"model": MODEL, "prompt": "hi", "top_k": 2**63}, 400),
    ("seed beyond int64", "/v1/completions", {"model": MODEL, "prompt": "hi", "seed": 2**64}, 400),
    ("five stop strings", "/v1/completions", {"model": MODEL, "prompt": "hi", "stop": list("abcde")}, 400),
    ("logprobs above 20", "/v1/completions", {"model": MODEL, "prompt": "hi", "logprobs": 21}, 400),
    ("echo on chat (not supported)", "/v1/chat/completions",
     {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "echo": True}, 400),
    ("prompt_logprobs above 20", "/v1/completions", {"model": MODEL, "prompt": "hi", "prompt_logprobs": 21}, 400),
    ("best_of (not supported)", "/v1/completions", {"model": MODEL, "prompt": "hi", "best_of": 2}, 400),
]


@pytest.mark.parametrize("name, path, body, status", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_input_gets_openai_error_and_server_keeps_serving(server, client, name, path, body, status):
    kwargs = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {"json": body}
    resp = httpx.post(server.url + path, timeout=30, **kwargs)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    # Streaming requests fail the same way, before any event is sent.
    if isinstance(body, dict) and status == 400 and "prompt" in body:
        resp = httpx.post(server.url + path, json={**body, "stream": True}, timeout=30)
        assert resp.status_code == 400 and "error" in resp.json()
    assert client.completions.create(model=MODEL, prompt="ok", max_tokens=2).choices[0].text is not None


def test_wrong_method_is_a_client_error(server):
    resp = httpx.get(server.url + "/v1/completions", timeout=30)
    assert resp.status_code == 405 and resp.json()["error"]["type"] == "invalid_request_error"


def test_stream_events_survive_line_splitting_clients():
    """Generated text may hold characters that JSON leaves raw but str.splitlines (and so httpx's
    aiter_lines) treats as line ends; each event must still arrive as one parseable line."""
    from httpx._decoders import LineDecoder

    from minisgl.server.http.generation import sse

    chunk = {"choices": [{"text": "a\x85b\u2028c\u2029d\r\ne\x1cf\u00e9\u4e2d"}]}
    lines = LineDecoder().decode(sse(chunk).decode()) + LineDecoder().flush()
    assert [json.loads(x.removeprefix("data: ")) for x in lines if x] == [chunk]
