"""What the chat and completions bodies share (`GenerationRequest`): the sampling fields written out
from minisgl.core.request_fields, stop strings, n, streaming, the structured-output formats, and
the refusal of every field this server does not implement (`KnownFieldsOnly`)."""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from minisgl.core.params import SamplingParams
from minisgl.core.request_fields import INT32_MAX, REQUEST_FIELDS
from minisgl.message import TextParams

from .protocol import MAX_STOP_CHARS, APIError, ClientNotes, LogitBias, StopField, StrictBody, TokenIdList, api_field

JSON_FORMS: dict[str, Any] = {"logit_bias": LogitBias}  # the JSON form of the fields whose values are not scalars
API_FIELDS = tuple(f for f in REQUEST_FIELDS if f.in_api)  # on the chat and completions bodies as themselves


class JsonSchemaSpec(StrictBody):
    model_config = ConfigDict(populate_by_name=True)

    name: str = Field(max_length=64)
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None


class TextFormat(StrictBody):
    type: Literal["text"]


class JsonObjectFormat(StrictBody):
    type: Literal["json_object"]


class JsonSchemaFormat(StrictBody):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]


# Fields clients send that this server does not implement, with the values that ask for nothing
# (a client library filling in a default must not be refused). Anything else is refused with 400
# unsupported_parameter naming the field, never silently ignored.
REFUSED_UNLESS: dict[str, tuple] = {
    # OpenAI
    "audio": (None,), "modalities": (None, ["text"]), "prediction": (None,), "reasoning_effort": (None,),
    "web_search_options": (None,), "verbosity": (None,), "functions": (None,), "function_call": (None, "none"),
    "store": (None, False), "service_tier": (None, "auto", "default"), "echo": (None, False), "suffix": (None, ""),
    "best_of": (None, 1),
    # vLLM / SGLang extensions
    "use_beam_search": (None, False), "length_penalty": (None, 1, 1.0), "include_stop_str_in_output": (None, False),
    "spaces_between_special_tokens": (None, True), "prompt_logprobs": (None,), "truncate_prompt_tokens": (None,),
    "bad_words": (None, []), "logits_processors": (None,), "structural_tag": (None,),
    "guided_decoding_backend": (None,), "guided_whitespace_pattern": (None,), "documents": (None,),
    "chat_template": (None,), "return_tokens_as_token_ids": (None, False),
    "add_special_tokens": (None,), "continue_final_message": (None, False), "regex": (None,), "ebnf": (None,),
    "json_schema": (None,), "no_stop_trim": (None, False), "lora_path": (None,), "return_hidden_states": (None, False),
    "separate_reasoning": (None,), "stream_reasoning": (None,), "mm_processor_kwargs": (None,),
    "cache_salt": (None,), "kv_transfer_params": (None,), "vllm_xargs": (None,), "min_p_decay": (None,),
}


class KnownFieldsOnly(BaseModel):
    """A request body that refuses what it does not implement. Fields not declared land in
    model_extra and are refused by unsupported_field() (or ignored, with --allow-unknown-fields,
    unless `refused_unless` lists them). Strict: a JSON value of the wrong type is an error, never
    silently converted (0 is not false)."""

    model_config = ConfigDict(extra="allow", strict=True)
    refused_unless: ClassVar[dict[str, tuple]] = REFUSED_UNLESS

    def unsupported_field(self, allow_unknown: bool = False) -> str | None:
        """The first field the request sends that this server does not implement, or None.
        Unknown fields are refused too unless `allow_unknown` (--allow-unknown-fields)."""
        for name, value in (self.model_extra or {}).items():
            neutral = self.refused_unless.get(name)
            if neutral is None:
                if not allow_unknown:
                    return name
            elif not any(value == v and type(value) is type(v) for v in neutral):
                return name
        return None


class StreamOptions(StrictBody):
    include_usage: bool = False


class SamplingFields(KnownFieldsOnly):
    """The request fields the chat and completions bodies take as themselves (API_FIELDS), written
    out in the table's order so that readers, IDEs and type checkers see them; their bounds and
    descriptions are the table's (api_field), and tests/server/test_request_bodies.py holds the
    names and JSON forms (JSON_FORMS, TokenIdList for token ids, else the field's api_type or type)
    equal to the table."""

    temperature: float | None = api_field("temperature")
    top_k: int | None = api_field("top_k")
    top_p: float | None = api_field("top_p")
    min_p: float | None = api_field("min_p")
    ignore_eos: bool | None = api_field("ignore_eos")
    stop_token_ids: TokenIdList | None = api_field("stop_token_ids")
    seed: int | None = api_field("seed")
    presence_penalty: float | None = api_field("presence_penalty")
    frequency_penalty: float | None = api_field("frequency_penalty")
    repetition_penalty: float | None = api_field("repetition_penalty")
    logit_bias: LogitBias | None = api_field("logit_bias")
    allowed_token_ids: TokenIdList | None = api_field("allowed_token_ids")
    min_tokens: int | None = api_field("min_tokens")
    priority: int | None = api_field("priority")


class GenerationRequest(SamplingFields, ClientNotes):
    """What the chat and completions bodies share: the sampling fields (SamplingFields, from
    minisgl.core.request_fields) and these."""

    model: str | None = Field(None, description="optional: the one model this server serves")
    stop: StopField = Field(None, description=f"a string or up to 4, each up to {MAX_STOP_CHARS} characters; "
                                              "generation ends before any of them")
    n: int | None = Field(1, ge=1, le=INT32_MAX)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    guided_json: dict | str | None = Field(None, description="extension (vLLM): output matches this JSON schema")
    guided_regex: str | None = Field(None, description="extension (vLLM): output matches this regular expression")
    guided_choice: Annotated[list[str], Field(min_length=1)] | None = \
        Field(None, description="extension (vLLM): output is one of these strings")
    guided_grammar: str | None = Field(None, description="extension (vLLM): output matches this EBNF grammar")
    skip_special_tokens: bool | None = Field(True, description="extension: leave special tokens out of the text")

    # `null` for these means their default, as in vLLM (the spec allows null for stream, n, ...).
    # Not max_tokens: null there means "as many as fit" (vLLM too), not completions' 16.
    NULL_IS_DEFAULT: ClassVar[frozenset[str]] = frozenset(
        {"n", "stream", "ignore_eos", "skip_special_tokens", "add_generation_prompt"})

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data):
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if not (v is None and k in cls.NULL_IS_DEFAULT)}
        return data

    @model_validator(mode="after")
    def _checks(self):
        if self.logit_bias:
            for key in self.logit_bias:
                if not (key.isascii() and key.isdigit()) or int(key) > INT32_MAX:  # int() reads '١٢' too
                    raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
        constraints = [name for name in ("response_format", "guided_json", "guided_regex", "guided_choice",
                                         "guided_grammar") if getattr(self, name) is not None
                       and not (name == "response_format" and self.response_format.type == "text")]
        if len(constraints) > 1:
            raise ValueError(f"only one of {', '.join(constraints)} may be given")
        return self

    def with_defaults(self, defaults: dict):
        """The request with the server's sampling defaults (--generation-config) for the fields it
        leaves unset."""
        unset = {k: v for k, v in defaults.items() if getattr(self, k, None) is None}
        return self.model_copy(update=unset) if unset else self

    def logprobs_k(self) -> int | None:
        """How many alternatives per token the request wants (None: no logprobs)."""
        return None

    def constraint(self) -> tuple[str, str] | None:
        """The structured-output constraint as (kind, spec), SamplingParams.constraint's form."""
        rf = self.response_format
        if rf is not None and rf.type == "json_object":
            return ("json_object", "")
        if rf is not None and rf.type == "json_schema":
            schema = rf.json_schema.schema_ if rf.json_schema.schema_ is not None else {}
            return ("json_schema", json.dumps(schema))  # strict or not, enforced as vLLM does (grammar.py)
        if self.guided_json is not None:
            spec = self.guided_json if isinstance(self.guided_json, str) else json.dumps(self.guided_json)
            return ("json_schema", spec)
        if self.guided_regex is not None:
            return ("regex", self.guided_regex)
        if self.guided_choice is not None:
            return ("choice", json.dumps(self.guided_choice))
        if self.guided_grammar is not None:
            return ("grammar", self.guided_grammar)
        return None

    def max_new_tokens(self) -> int | None:
        """The most tokens a choice may generate (None: as many as fit); each request spells it its way."""
        raise NotImplementedError

    def sampling_params(self) -> SamplingParams:
        """The request's SamplingParams, checked here in the API server: an impossible combination
        (min_tokens above max_tokens, min_tokens with a grammar, a schema that is not JSON) is the
        client's 400 naming the field, and nothing invalid enters the pipeline. max_tokens None
        stays for the scheduler to resolve."""
        values = {}
        for f in API_FIELDS:
            value = getattr(self, f.name)
            values[f.name] = f.default if value is None else f.from_api(value) if f.from_api else value
        try:
            return SamplingParams(**values, max_tokens=self.max_new_tokens(), logprobs=self.logprobs_k(),
                                  constraint=self.constraint())
        except ValueError as e:
            raise APIError(400, str(e), code="invalid_request") from None

    def text_params(self, template: dict | None = None) -> TextParams:
        """What only the tokenizer (`template`: chat) and the detokenizer read of the request."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return TextParams(stop, self.skip_special_tokens is not False, template)  # null: the default, True
