"""Every field a client sends works or is refused: the real server on a tiny random model, driven
with the official `openai` client and raw HTTP. Implemented sampling controls are checked against
HF transformers' generate() with its own logits processors; refused fields get a 400
`unsupported_parameter` naming them; `null` means the default."""

from __future__ import annotations

from collections import Counter

import httpx
import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.server.http.generation_protocol import REFUSED_UNLESS
from tests.server.serving import ServerProcess, tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
SERVER_ARGS = ["--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", "2048",
               "--max-running-requests", "16", "--max-seq-len", "256"]
CHAT = [{"role": "user", "content": "What is a radix tree?"}]


model_dir, server, client = tiny_qwen3_server(*SERVER_ARGS)


@pytest.fixture(scope="module")
def hf(model_dir):
    """HF generate(), greedy, with the given logits-processor options: the reference ids."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)

    def generate(prompt: list[int], new_tokens: int, **processors) -> list[int]:
        processors.setdefault("eos_token_id", None)
        out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             **processors)
        return out[0, len(prompt):].tolist()

    return generate, tok, model


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


# -- refused and unknown fields ------------------------------------------------------------------

@pytest.mark.parametrize("field", sorted(REFUSED_UNLESS))
def test_each_unimplemented_field_is_refused_by_name(server, field):
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 2, field: {"asks": "for something"}}
    resp = post(server, "/v1/chat/completions", body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "unsupported_parameter" and error["param"] == field and field in error["message"]


def test_unknown_field_is_refused_through_the_openai_client(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2, extra_body={"frobnicate": 1})
    assert e.value.body["code"] == "unsupported_parameter" and e.value.body["param"] == "frobnicate"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="hi", max_tokens=2, extra_body={"beam_width": 4})


@pytest.mark.parametrize("body, param", [
    ({"stream_options": {"include_usage": True, "continuous_usage_stats": True}}, "stream_options.continuous_usage_stats"),
    ({"messages": [{"role": "user", "content": "hi", "audio": {"id": "x"}}]}, "messages.0.audio"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "extra": 1}}},
     "response_format.json_schema.json_schema.extra"),
])
def test_unknown_nested_fields_are_refused_by_path(server, body, param):
    resp = post(server, "/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 2, **body})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "unsupported_parameter" and resp.json()["error"]["param"] == param


def test_unknown_fields_pass_only_with_the_permissive_flag(model_dir):
    srv = ServerProcess("--model", model_dir, *SERVER_ARGS, "--allow-unknown-fields").wait_ready()
    try:
        ok = post(srv, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "frobnicate": 1})
        assert ok.status_code == 200, ok.text
        # Known but unimplemented fields are refused even then.
        refused = post(srv, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "suffix": "!"})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "suffix"
    finally:
        assert srv.stop() == 0


def test_neutral_values_of_unimplemented_fields_are_accepted(client):
    """Client libraries send defaults (store false, text modality): those ask for nothing."""
    resp = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2, store=False, modalities=["text"],
                                          service_tier="auto", user="u1", metadata={"k": "v"},
                                          response_format={"type": "text"})
    assert resp.choices[0].finish_reason in ("stop", "length")


def test_nonsense_response_format_is_refused(server):
    resp = post(server, "/v1/chat/completions", {"model": MODEL, "messages": CHAT, "response_format": {"type": "nonsense"}})
    assert resp.status_code == 400 and resp.json()["error"]["param"].startswith("response_format")


@pytest.mark.parametrize("field, value", [("logit_bias", {"5": 101}), ("logit_bias", {"x": 1}),
                                          ("logit_bias", {"100000": 5}), ("presence_penalty", 2.5),
                                          ("frequency_penalty", -2.1), ("repetition_penalty", 0),
                                          ("min_tokens", -1), ("min_tokens", 50)])
def test_out_of_range_sampling_controls_are_400(server, field, value):
    resp = post(server, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 8, field: value})
    assert resp.status_code == 400, resp.text
    assert field in resp.json()["error"]["message"]


@pytest.mark.parametrize("body", [{"min_tokens": 300},  # above the rest of the context (--max-seq-len 256)
                                  {"min_tokens": 2, "response_format": {"type": "json_object"}},
                                  # once took the scheduler down (an index far outside the logits)
                                  {"max_tokens": 4, "min_tokens": 2, "stop_token_ids": [2147483647]}])
def test_an_impossible_combination_is_400_naming_the_field_and_the_server_serves_on(server, body):
    """Caught by SamplingParams (on its way to the scheduler, or at the scheduler once it knows the
    context left): the client gets a clear 400, the workers stay up, the next request is served."""
    resp = post(server, "/v1/chat/completions", {"model": MODEL, "messages": CHAT, **body})
    assert resp.status_code == 400, resp.text
    field = "stop_token_ids" if "stop_token_ids" in body else "min_tokens"
    assert resp.json()["error"]["code"] == "invalid_request" and field in resp.json()["error"]["message"]
    resp = post(server, "/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 2, "ignore_eos": True})
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 2


def test_null_means_the_default(server):
    nulls = {k: None for k in ("n", "stream", "stop", "temperature", "top_p", "seed", "logit_bias", "presence_penalty",
                               "frequency_penalty", "stream_options", "logprobs", "response_format", "user",
                               "max_completion_tokens", "tools", "tool_choice", "store")}
    resp = post(server, "/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 3, **nulls})
    assert resp.status_code == 200, resp.text
    assert len(resp.json()["choices"]) == 1
    resp = post(server, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 3, "echo": None,
                                            "best_of": None, "suffix": None, "n": None, "stream": None})
    assert resp.status_code == 200, resp.text


def test_model_is_optional_with_one_model_served(server):
    resp = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert resp.status_code == 200, resp.text


# -- implemented sampling controls, end to end against HF ------------------------------------------

PROMPT = [5, 17, 42, 99, 7, 23]


def _completion_text(client, **kw) -> str:
    resp = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, **kw)
    return resp.choices[0].text


def test_repetition_penalty_and_logit_bias_match_hf_generate(client, hf):
    generate, tok, _ = hf
    want = generate(PROMPT, 24, repetition_penalty=1.8, sequence_bias={(40,): 3.0, (41,): -100.0})
    got = _completion_text(client, max_tokens=24, logit_bias={"40": 3.0, "41": -100},
                           extra_body={"repetition_penalty": 1.8, "ignore_eos": True})
    assert got == tok.decode(want, skip_special_tokens=True)


def test_negative_bias_on_the_greedy_token_changes_the_output(client, hf):
    generate, tok, _ = hf
    greedy = generate(PROMPT, 1)[0]
    plain = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=1, logprobs=0)
    assert plain.choices[0].logprobs.tokens == [tok.decode([greedy])]
    banned = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=1, logprobs=0,
                                       logit_bias={str(greedy): -100})
    assert banned.choices[0].logprobs.tokens != [tok.decode([greedy])]


def test_presence_and_frequency_penalties_follow_openai_formula(client, hf):
    """HF has no processor for them: the reference applies OpenAI's formula, greedily, to the logits
    of HF's own forward pass."""
    _, tok, model = hf
    seq, ids = list(PROMPT), []
    for _ in range(16):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0, -1].clone()
        for token, count in Counter(ids).items():
            logits[token] -= 0.7 * count + 1.5
        ids.append(int(logits.argmax()))
        seq.append(ids[-1])
    got = _completion_text(client, max_tokens=16, presence_penalty=1.5, frequency_penalty=0.7,
                           extra_body={"ignore_eos": True})
    assert got == tok.decode(ids, skip_special_tokens=True)


def test_min_tokens_holds_back_stop_ids_as_hf_min_new_tokens(client, hf):
    generate, tok, _ = hf
    first = generate(PROMPT, 1)[0]
    short = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=12,
                                      extra_body={"stop_token_ids": [first]})
    assert short.usage.completion_tokens == 1 and short.choices[0].finish_reason == "stop"
    held = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=12, logprobs=0,
                                     extra_body={"stop_token_ids": [first], "min_tokens": 5})
    want = generate(PROMPT, 12, min_new_tokens=5, eos_token_id=[first, tok.eos_token_id])
    assert len(want) >= 5 and first not in want[:5]
    assert held.choices[0].logprobs.tokens == [tok.decode([t]) for t in want]


def test_skip_special_tokens_false_keeps_them_in_the_text(client, hf):
    _, tok, _ = hf
    eos = tok.eos_token_id
    resp = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=1,
                                     logit_bias={str(eos): 100}, extra_body={"skip_special_tokens": False,
                                                                             "ignore_eos": True})
    assert resp.choices[0].text == tok.eos_token
    resp = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=1,
                                     logit_bias={str(eos): 100}, extra_body={"ignore_eos": True})
    assert resp.choices[0].text == ""


def test_add_generation_prompt_and_template_kwargs_reach_the_template(client, hf):
    _, tok, _ = hf
    with_prompt = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=1)
    without = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=1,
                                             extra_body={"add_generation_prompt": False,
                                                         "chat_template_kwargs": {"enable_thinking": False}})
    count = lambda gen: len(tok.apply_chat_template(CHAT, add_generation_prompt=gen, tokenize=True)["input_ids"])  # noqa: E731
    assert with_prompt.usage.prompt_tokens == count(True)
    assert without.usage.prompt_tokens == count(False)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=1,
                                       extra_body={"chat_template_kwargs": {"tokenize": False}})


def test_allowed_token_ids_keeps_greedy_decoding_to_those_tokens(client, hf):
    """The reference takes HF's logits and argmaxes over the allowed tokens only."""
    _, tok, model = hf
    allowed = [40, 41, 42, 77]
    seq, ids = list(PROMPT), []
    for _ in range(12):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0, -1]
        ids.append(allowed[int(logits[allowed].argmax())])
        seq.append(ids[-1])
    resp = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=12, logprobs=0,
                                     extra_body={"allowed_token_ids": allowed, "ignore_eos": True})
    assert resp.choices[0].logprobs.tokens == [tok.decode([t]) for t in ids]


def test_allowed_token_ids_bound_sampling_and_an_id_outside_the_vocabulary_is_named(server, client, hf):
    _, tok, model = hf
    allowed = [50, 51]
    resp = client.completions.create(model=MODEL, prompt=PROMPT, temperature=1.5, seed=3, max_tokens=24, logprobs=0,
                                     extra_body={"allowed_token_ids": allowed, "ignore_eos": True})
    assert set(resp.choices[0].logprobs.tokens) <= {tok.decode([t]) for t in allowed}
    vocab = model.config.vocab_size
    bad = post(server, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2,
                                           "allowed_token_ids": [1, vocab]})
    assert bad.status_code == 400 and "allowed_token_ids" in bad.json()["error"]["message"], bad.text
