"""Every sampling field of a generation request, declared once: name, type, default, valid range
and meaning. `SamplingParams` takes its range checks from this table and writes its fields out
(name, type and default, in this order), and the OpenAI request bodies (minisgl.server.http.generation_protocol)
write out the fields they take as themselves and take their bounds, descriptions and the conversion
to SamplingParams from here; tests hold both equal to the table, so a new sampling field is one entry
here, its line in SamplingParams (and in SamplingFields if the API takes it), and the code that acts
on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_LOGPROBS = 20  # most alternatives reported per token (OpenAI's top_logprobs limit)
INT32_MAX = 2**31 - 1
MAX_LOGIT_BIAS_TOKENS = 1024  # bounded at the door: the biases travel through every process
MAX_TOKEN_IDS = 1024  # per list of token ids a request carries (stop_token_ids, ...)


@dataclass(frozen=True)
class Range:
    """A closed or open interval; None leaves that side unbounded."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __contains__(self, x: float) -> bool:
        return ((self.ge is None or x >= self.ge) and (self.gt is None or x > self.gt)
                and (self.le is None or x <= self.le) and (self.lt is None or x < self.lt))

    def describe(self) -> str:
        """'>= 0', '> 0', 'in (0, 1]', ...: how an error message states the range."""
        low = (f"[{_num(self.ge)}" if self.ge is not None else f"({_num(self.gt)}" if self.gt is not None else None)
        high = (f"{_num(self.le)}]" if self.le is not None else f"{_num(self.lt)})" if self.lt is not None else None)
        if low and high:
            return f"in {low}, {high}"
        if low:
            return (">= " if low[0] == "[" else "> ") + low[1:]
        return ("<= " if high[-1] == "]" else "< ") + high[:-1]

    def bounds(self) -> dict[str, float]:
        """pydantic's Field(ge=..., le=...) arguments."""
        return {k: v for k, v in vars(self).items() if v is not None}


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class RequestField:
    name: str
    type: Any  # SamplingParams' annotation
    default: Any  # what a request that leaves the field unset gets
    doc: str
    valid: Range | None = None  # SamplingParams refuses values outside it (ValueError naming the field)
    api: Range | None = None  # the API's bounds (OpenAI's where it documents them); None: `valid`
    # The API's JSON form, where it is not `type` (a pydantic annotation), and its conversion to
    # the SamplingParams value.
    api_type: Any = None
    from_api: Callable[[Any], Any] | None = None
    # Declared on the chat and completions bodies as itself (False: an endpoint spells it its own
    # way, e.g. max_tokens and logprobs, or it is derived from other fields, e.g. constraint).
    in_api: bool = True
    model_default: bool = False  # the model's generation_config.json may set it (--generation-config)

    @property
    def api_range(self) -> Range | None:
        return self.api or self.valid

    @property
    def token_ids(self) -> bool:
        """A list of token ids: the API takes at most MAX_TOKEN_IDS, the scheduler checks each
        against the vocabulary."""
        return self.type == tuple[int, ...]

    def problem(self, value: Any) -> str | None:
        """Why `value` is not valid for this field, or None."""
        if self.valid is None or value is None or value in self.valid:
            return None
        return f"{self.name} must be {self.valid.describe()}, got {value}"


def _logit_bias(value: dict[str, float]) -> tuple[tuple[int, float], ...]:
    return tuple((int(t), float(b)) for t, b in value.items())


# The order is SamplingParams' field order (its positional form, and so its wire form).
REQUEST_FIELDS: tuple[RequestField, ...] = (
    RequestField("temperature", float, 1.0, "0 is greedy; higher flattens the distribution",
                 valid=Range(ge=0), api=Range(ge=0, le=2), model_default=True),
    RequestField("top_k", int, -1, "extension: keep the k most likely tokens (<= 0: all)",
                 api=Range(ge=-1, le=INT32_MAX), model_default=True),
    RequestField("top_p", float, 1.0, "keep the most likely tokens up to this probability mass (1: all)",
                 valid=Range(gt=0, le=1), model_default=True),
    RequestField("min_p", float, 0.0, "extension: drop tokens below this fraction of the most likely one's "
                 "probability (0: none)", valid=Range(ge=0, le=1), model_default=True),
    # None: the rest of the context, at most the server's max_new_tokens. Only the scheduler knows
    # both, so the request carries None that far and Scheduler.resolve makes it a number there,
    # before anything reads it (admission, page budget, the finish check).
    RequestField("max_tokens", int | None, 128, "most tokens generated", valid=Range(ge=1),
                 api=Range(ge=1, le=INT32_MAX), in_api=False),
    RequestField("ignore_eos", bool, False, "extension: keep generating past end-of-sequence"),
    RequestField("stop_token_ids", tuple[int, ...], (), f"extension: up to {MAX_TOKEN_IDS}; generation ends "
                 "at any of them"),
    RequestField("stop", tuple[str, ...], (), "stop strings, matched on detokenized text by the frontend",
                 in_api=False),
    RequestField("seed", int | None, None, "the same seed draws the same tokens, whatever else runs in the batch",
                 api=Range(ge=0, le=2**63 - 1)),
    # None: off. k >= 0: report each sampled token's log-probability and the k most likely
    # tokens' (under the model's own distribution: the raw logits, before temperature and filters).
    RequestField("logprobs", int | None, None, "how many alternatives to report per token (None: no logprobs)",
                 valid=Range(ge=0, le=MAX_LOGPROBS), in_api=False),
    # Penalties over the tokens so far. presence/frequency (OpenAI): subtracted from the logits
    # of tokens already generated, once / once per occurrence. repetition (HF, vLLM): over prompt
    # and output, positive logits divided by it and negative ones multiplied; 1 is off.
    RequestField("presence_penalty", float, 0.0, "minus this for each token already generated",
                 valid=Range(ge=-2, le=2)),
    RequestField("frequency_penalty", float, 0.0, "minus this times how often a token was generated",
                 valid=Range(ge=-2, le=2)),
    RequestField("repetition_penalty", float, 1.0, "extension (HF/vLLM): >1 discourages tokens of prompt and output",
                 valid=Range(gt=0, le=2**31), api=Range(gt=0, le=100), model_default=True),
    RequestField("logit_bias", tuple[tuple[int, float], ...], (), "token id (a string) -> added to its logit, "
                 "-100..100", api_type=dict[str, float], from_api=_logit_bias),
    RequestField("allowed_token_ids", tuple[int, ...], (), "extension (vLLM): only these tokens may be sampled "
                 "(empty: any)"),
    RequestField("min_tokens", int, 0, "extension: end-of-sequence and stop ids are impossible before this many",
                 valid=Range(ge=0), api=Range(ge=0, le=INT32_MAX)),
    # Structured output: (kind, spec) with kind json_object / json_schema / regex / choice
    # (minisgl.constrained compiles it); None: unconstrained. The API derives it from
    # response_format, guided_* and tool_choice.
    RequestField("constraint", tuple[str, str] | None, None, "structured output: (kind, spec)", in_api=False),
    # The LoRA adapter that serves the request, by the name it was loaded under (minisgl.lora); None: the base
    # model. The API takes it from the `model` field.
    RequestField("lora", str | None, None, "the LoRA adapter's name (None: the base model)", in_api=False),
    # vLLM's meaning: lower runs first. It orders admission and the choice of whom to preempt under
    # --scheduling-policy priority; under fcfs (the default) only 0 is accepted (the scheduler refuses others).
    RequestField("priority", int, 0, "extension (vLLM): lower runs first under --scheduling-policy priority",
                 api=Range(ge=-INT32_MAX - 1, le=INT32_MAX)),
    # None: off. k >= 0: each prompt token's log-probability (from the second) and the k most likely
    # tokens' at its position; the prefill then computes every prompt position (no cached prefix).
    # The completions API also sets it for echo with logprobs.
    RequestField("prompt_logprobs", int | None, None, "extension (vLLM): the prompt's logprobs and this many "
                 "alternatives per prompt token (None: none)", valid=Range(ge=0, le=MAX_LOGPROBS), in_api=False),
    # Who sent the request, as the API server tells clients apart (its address): grammar compiles are
    # queued fairly between clients (minisgl.constrained.fair_queue). "": one anonymous client.
    RequestField("client", str, "", "who sent the request (the API server's name for its client)", in_api=False),
)
FIELDS: dict[str, RequestField] = {f.name: f for f in REQUEST_FIELDS}
TOKEN_ID_FIELDS: tuple[RequestField, ...] = tuple(f for f in REQUEST_FIELDS if f.token_ids)
# generation_config.json keys that are request fields of the same name and meaning.
MODEL_DEFAULT_KEYS: tuple[str, ...] = tuple(f.name for f in REQUEST_FIELDS if f.model_default)

