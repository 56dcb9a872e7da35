"""Structured output on a tiny model with random weights, sampled at temperature 1: whatever the
model would say, the grammar mask makes the text valid JSON matching the schema (checked with the
`jsonschema` validator), match the regex, or be one of the choices."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import torch
from transformers import AutoTokenizer

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM

SCHEMA = {
    "type": "object",
    "properties": {
        # A pattern, not maxLength: xgrammar lets a string hold UTF-8-encoded surrogates (invalid
        # UTF-8), which decode to three U+FFFD each, so a random model can overrun a maxLength.
        "name": {"type": "string", "pattern": "^[a-z ]{1,12}$"},
        "note": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "blue"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "ok"],
    "additionalProperties": False,
}
PROMPT = [5, 17, 42, 99]


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    path = tiny_model_dir("Qwen3ForCausalLM")
    llm = LLM(path, device="cpu", dtype=torch.float32, num_pages=1024, page_size=4, grammar_compile_workers=1)
    yield llm, AutoTokenizer.from_pretrained(path)
    llm.shutdown()


def _run(llm, constraint, count: int, max_tokens: int = 120, **kw) -> list[tuple[str, str]]:
    model, tok = llm
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=max_tokens, constraint=constraint, **kw)
              for i in range(count)]
    outs = model.generate([PROMPT] * count, params, use_tqdm=False)
    return [(tok.decode(o["token_ids"], skip_special_tokens=True), o["finish_reason"]) for o in outs]


@pytest.mark.slow
def test_json_schema_output_is_always_valid_and_ends_by_itself(llm):
    for text, reason in _run(llm, ("json_schema", json.dumps(SCHEMA)), 12):
        assert reason == "stop", text
        value = json.loads(text)  # strict: no raw control character in a string
        note = value.pop("note", "")
        jsonschema.validate(value, SCHEMA)
        assert len(note.encode("utf-8", "surrogatepass")) <= 6 * 4


@pytest.mark.slow
def test_json_object_mode_gives_a_json_object(llm):
    finished = [(t, r) for t, r in _run(llm, ("json_object", ""), 6, max_tokens=200) if r == "stop"]
    assert finished, "no JSON object ended within 200 tokens"
    for text, _ in finished:
        assert isinstance(json.loads(text), dict), text


def test_regex_and_choice(llm):
    for text, reason in _run(llm, ("regex", r"[a-c]{2,5}-\d{3}"), 4):
        assert reason == "stop" and re.fullmatch(r"[a-c]{2,5}-\d{3}", text), text
    choices = ["yes", 'no "quoted"', "maybe\nlater"]
    for text, reason in _run(llm, ("choice", json.dumps(choices)), 6):
        assert reason == "stop" and text in choices, text


def test_constrained_and_free_requests_share_a_batch(llm):
    model, tok = llm
    free = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    alone = model.generate([PROMPT], free, use_tqdm=False)[0]["token_ids"]
    params = [free, SamplingParams(temperature=1.0, seed=3, max_tokens=120, constraint=("json_schema", json.dumps(SCHEMA)))]
    outs = model.generate([PROMPT, PROMPT], params, use_tqdm=False)
    assert outs[0]["token_ids"] == alone  # the unconstrained row is untouched by the mask
    jsonschema.validate(json.loads(tok.decode(outs[1]["token_ids"], skip_special_tokens=True)), SCHEMA)


def test_invalid_constraints_are_reported_not_crashing(llm):
    model, _ = llm
    with pytest.raises(ValueError, match="JSON"):
        SamplingParams(constraint=("json_schema", "{not json"))
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(constraint=("json_object", ""), min_tokens=3, max_tokens=10)
    with pytest.raises(ValueError, match=r"^cannot compile the regex constraint \(guided_regex\): Regex parsing error"):
        model.generate([PROMPT], SamplingParams(max_tokens=5, constraint=("regex", "(unclosed")), use_tqdm=False)
    # The scheduler keeps serving.
    assert model.generate([PROMPT], SamplingParams(max_tokens=3, temperature=0), use_tqdm=False)[0]["token_ids"]
