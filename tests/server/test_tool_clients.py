"""The agent and structured-output clients people use, at their defaults, against a server started
with no parser flags (the tool-call parser comes from the model's chat template): LangChain
(`bind_tools`, `with_structured_output`), the OpenAI Agents SDK (a function tool and an
`output_type`, on the chat and the Responses model), pydantic-ai (tools with structured output)
and instructor (TOOLS, PARALLEL_TOOLS, JSON_SCHEMA, RESPONSES_TOOLS; in a virtual environment of
its own, tests/tools/instructor.sh, for the openai version it pins).

A random-weight model cannot answer sensibly, so each test checks the protocol path: no client
exception, grammar-bound output that parses into the client's types, tool calls in the right
shape, the tool run by the client where the call is forced (a named tool_choice), generated
with a guided_regex in the model's own tool syntax, or chosen by the model beside a JSON-schema
output (tool_choice auto: a call or an answer; a random model may call on every turn, so those
runs end in the output type or at the client's turn limit with the tool run)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from tests.server.serving import tiny_qwen3_server
from tests.server.tool_chat import TEMPLATE
from tests.tool_venvs import tool_binary

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny-qwen3"
SETTINGS = {"temperature": 0.0, "max_tokens": 120}

# No --tool-call-parser, no --reasoning-parser: what a new user starts. The arguments of test_anthropic.py
# and test_litellm.py: the three modules share one server.
model_dir, server, client = tiny_qwen3_server(
    "--served-model-name", MODEL, "--dtype", "float32", "--page-size", "4", "--num-pages", "2048", "--max-seq-len",
    "1024", "--chat-template", TEMPLATE)


class Weather(BaseModel):
    city: Literal["Paris", "Oslo"]
    sunny: bool


def _hermes_call(name: str, arguments: str) -> str:
    """A guided_regex for one call in the template's own syntax (what a tuned Qwen writes)."""
    return rf'<tool_call>\n\{{"name": "{name}", "arguments": \{{{arguments}\}}\}}\n</tool_call>'


def test_the_server_log_names_the_parser_it_chose(server):
    assert "tool-call parser: hermes (the chat template writes <tool_call>" in server.output()


def test_langchain_bind_tools_and_with_structured_output_at_their_defaults(server):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    ran = []

    @tool
    def get_weather(city: Literal["Paris", "Oslo"]) -> str:
        """Weather of a city."""
        ran.append(city)
        return "sunny"

    llm = ChatOpenAI(base_url=server.url + "/v1", api_key="unused", model=MODEL, **SETTINGS)
    reply = llm.bind_tools([get_weather]).invoke("Weather in Paris?")  # tool_choice auto, as LangChain sends it
    assert isinstance(reply.content, str) and "<tool_call>" not in reply.content
    # The model's own call syntax, generated, comes back as a call LangChain runs.
    called = llm.bind_tools([get_weather]).invoke(
        "Weather in Paris?", extra_body={"guided_regex": _hermes_call("get_weather", r'"city": "(Paris|Oslo)"')})
    assert [c["name"] for c in called.tool_calls] == ["get_weather"] and called.content == ""
    result = get_weather.invoke(called.tool_calls[0])
    assert isinstance(result, ToolMessage) and ran == [called.tool_calls[0]["args"]["city"]]
    after = llm.bind_tools([get_weather]).invoke([HumanMessage("Weather in Paris?"), called, result])
    assert isinstance(after.content, str)

    verdict = llm.with_structured_output(Weather).invoke("Weather in Oslo?")  # its default: json_schema
    assert isinstance(verdict, Weather)


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_openai_agents_runs_its_tool_then_answers_in_the_output_type(server, model_dir, kind):
    from agents import (
        Agent,
        MaxTurnsExceeded,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no trace upload to OpenAI: the test stays offline
    ran = []

    @function_tool
    def get_weather(city: Literal["Paris", "Oslo"]) -> str:
        """Weather of a city."""
        ran.append(city)
        return "sunny"

    async def runs() -> tuple:
        async with AsyncOpenAI(base_url=server.url + "/v1", api_key="unused") as client:
            model = (OpenAIChatCompletionsModel if kind == "chat" else OpenAIResponsesModel)(MODEL, client)
            # tool_choice names the tool: the first turn calls it (beside the output_type's schema);
            # the SDK then resets tool_choice to auto.
            forced = Agent(name="weather", instructions="Be brief.", tools=[get_weather], output_type=Weather,
                           model=model, model_settings=ModelSettings(tool_choice="get_weather", **SETTINGS))
            # Its defaults: tool_choice auto beside the output_type.
            default = Agent(name="weather", tools=[get_weather], output_type=Weather, model=model,
                            model_settings=ModelSettings(**SETTINGS))

            async def final(agent, question) -> tuple:  # (its output or None at max_turns, the tool's runs)
                before = len(ran)
                try:  # each turn's grammar allows a call or an answer: a random model may call every turn
                    output = (await Runner.run(agent, question, max_turns=4)).final_output
                except MaxTurnsExceeded:
                    output = None
                return output, len(ran) - before

            # On the chat model, the same named first turn (a JSON arguments object) with "<", a Hermes
            # call's first character, barred from then on: the tool runs once, then the answer is
            # the output type. (Responses refuses logit_bias.)
            steered = Agent(name="weather", tools=[get_weather], output_type=Weather, model=model,
                            model_settings=ModelSettings(tool_choice="get_weather", **SETTINGS,
                                                         extra_body={"logit_bias": {angle: -100}}))
            return (await final(forced, "Weather in Paris?"), await final(default, "Weather in Oslo?"),
                    await final(steered, "Weather in Paris?") if kind == "chat" else None)

    from transformers import AutoTokenizer

    angle = str(AutoTokenizer.from_pretrained(model_dir).convert_tokens_to_ids("<"))
    (forced, forced_runs), (default, default_runs), steered = asyncio.run(runs())
    if steered is not None:
        assert isinstance(steered[0], Weather) and steered[1] == 1, steered
    assert ran and set(ran) <= {"Paris", "Oslo"}
    # Named first: the tool runs; then tool_choice auto beside the output_type, as at the defaults,
    # ends in an answer of the output type, or in the SDK running every call until max_turns.
    assert forced_runs >= 1 and (isinstance(forced, Weather) or (forced is None and forced_runs >= 2))
    assert isinstance(default, Weather) or (default is None and default_runs >= 2)


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_pydantic_ai_tools_with_structured_output(server, kind):
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    provider = OpenAIProvider(base_url=server.url + "/v1", api_key="unused")
    model = (OpenAIChatModel if kind == "chat" else OpenAIResponsesModel)(MODEL, provider=provider)
    # Its default output (a final_result tool, tool_choice required), JSON-schema output and text.
    for output_type, expected in ((Weather, Weather), (NativeOutput(Weather), Weather), (str, str)):
        agent = Agent(model, output_type=output_type, model_settings=SETTINGS)
        ran = []

        @agent.tool_plain
        def get_weather(city: Literal["Paris", "Oslo"]) -> str:
            """Weather of a city."""
            ran.append(city)
            return "sunny"

        try:  # JSON-schema output beside tools (tool_choice auto): each request may call the tool or
            # answer, and a random model may call it on every one: pydantic-ai has no turn limit of its own
            output = agent.run_sync("Weather in Paris?", usage_limits=UsageLimits(request_limit=3)).output
        except UsageLimitExceeded:
            assert isinstance(output_type, NativeOutput) and len(ran) >= 2 and set(ran) <= {"Paris", "Oslo"}
            continue
        assert isinstance(output, expected)


def test_instructor_modes(server):
    parallel = (_hermes_call("Weather", r'"city": "(Paris|Oslo)", "days": [1-7]') + r"\n"
                + _hermes_call("Time", r'"zone": "(UTC|CET)"'))
    script = Path(__file__).with_name("instructor_client.py")
    done = subprocess.run([str(tool_binary("instructor", "python")), str(script), server.url + "/v1", MODEL, parallel],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name, objects in results.items():
        assert all("error" not in o for o in objects), (name, objects)
    assert [o["type"] for o in results["tools"]] == ["Weather"]  # a named tool_choice
    assert [o["type"] for o in results["responses_tools"]] == ["Weather"]  # named, beside text.format
    assert [o["type"] for o in results["parallel_tools"]] == ["Weather", "Time"]  # tool_choice auto
    assert all([o["type"] for o in results[f"json_schema_{seed}"]] == ["Weather"] for seed in range(4))
