"""A generation request's choices as the jobs the pipeline runs (`Job`): one per prompt and choice,
each with its SamplingParams for the scheduler and its TextParams for the tokenizer and
detokenizer. The chat completions, Responses and Messages routes all make theirs with chat_jobs."""

from __future__ import annotations

from dataclasses import dataclass, replace

from minisgl.core.params import SamplingParams
from minisgl.message import TextParams

from ..parsers import TOOL_PARSERS, ChatOutputFormat
from .chat_protocol import ChatCompletionRequest
from .completions_protocol import CompletionRequest
from .protocol import APIError


@dataclass(frozen=True)
class Job:
    """One choice of one prompt: FrontendClient.generate(params, **prompt, text_params=...)."""

    prompt_index: int
    params: SamplingParams
    prompt: dict  # text, input_ids or messages
    text_params: TextParams

    def generate_kwargs(self) -> dict:
        return {**self.prompt, "text_params": self.text_params}


def nth_choice(params: SamplingParams, j: int) -> SamplingParams:
    """Choice j of n: with a seed, each choice gets its own (seed + j), so the n choices differ
    from each other and the whole response still reproduces."""
    return params if j == 0 or params.seed is None else replace(params, seed=params.seed + j)


def with_lora(jobs: list[Job], lora: str | None) -> list[Job]:
    """The jobs run under the LoRA adapter the request's model names (None: the base model)."""
    return jobs if lora is None else [replace(job, params=replace(job.params, lora=lora)) for job in jobs]


def with_client(jobs: list[Job], client: str) -> list[Job]:
    """The jobs as sent by `client` (the scheduler queues grammar compiles fairly between clients)."""
    return [replace(job, params=replace(job.params, client=client)) for job in jobs]


def chat_jobs(body: ChatCompletionRequest, output: ChatOutputFormat) -> list[Job]:
    """A chat's n choices; `output`: how they are read back (its tool parser's syntax may bind a
    call beside an answer format)."""
    params = body.sampling_params()
    syntax = output.tool_parser and TOOL_PARSERS[output.tool_parser].syntax
    if output.tool_parser and not syntax and body.tool_mode == "auto" and any(t.function.strict for t in body.tools or ()):
        raise APIError(400, f"tools: strict functions are held to their schemas in calls written as one JSON object "
                            f"(hermes, llama3_json); this model's {output.tool_parser} calls are not; send strict: "
                            "false, or tool_choice required or a named function", param="tools", code="invalid_request")
    either = body.call_or_answer(syntax) or body.strict_calls(syntax)
    if either is not None:
        try:
            params = replace(params, constraint=either)
        except ValueError as e:  # a field that cannot go with it (min_tokens, allowed_token_ids)
            raise APIError(400, str(e), code="invalid_request") from None
    prompt = {"messages": [m.as_template_input() for m in body.messages]}
    text_params = body.text_params(body.template_options())
    return [Job(0, nth_choice(params, j), prompt, text_params) for j in range(body.n or 1)]


def completion_jobs(body: CompletionRequest) -> list[Job]:
    """A completion's choices: every prompt, n times."""
    params, text_params = body.sampling_params(), body.text_params()
    return [Job(i, nth_choice(params, j), prompt, text_params)
            for i, prompt in enumerate(body.prompts()) for j in range(body.n or 1)]  # n null: 1
