"""The built-in demo model (`python -m minisgl` with no --model): trained at the first start, so with
real clients and small max_tokens it answers briefly and stops, fills a response_format schema and
calls a tool (all fail on a random model); its chat template renders tools in Qwen's Hermes syntax, so tool_choice auto works on
a server started with no flags."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

import openai
import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel
from transformers import AutoTokenizer

from minisgl.demo.model import CHAT_TEMPLATE, DEMO_CHAT_TEMPLATE, DEMO_RECIPE, demo_model_dir, recipe_key
from minisgl.server.args import ServerArgs
from minisgl.server.parsers import tool_parser_for
from tests.reaper import end_group, start_in_own_group
from tests.server.serving import ServerProcess
from tests.server.tool_chat import CHAT, WEATHER


def test_the_demo_renders_tools_and_calls_as_qwen_and_plain_chats_as_before():
    tok = AutoTokenizer.from_pretrained(demo_model_dir())
    chat = [{"role": "system", "content": "Be brief."}, *CHAT]
    assert tok.apply_chat_template(chat, tokenize=False) == tok.apply_chat_template(chat, tokenize=False,
                                                                                   chat_template=CHAT_TEMPLATE)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    history = [*CHAT, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    prompt = tok.apply_chat_template(history, tools=[WEATHER], tokenize=False, add_generation_prompt=True)
    assert json.dumps(WEATHER) in prompt
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' \
           '<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n' in prompt
    choice = tool_parser_for(ServerArgs())
    assert choice.parser == "hermes" and "<tool_call>" in choice.why


def test_the_demo_is_trained_once_into_a_folder_named_by_its_recipe_key():
    """The session's demo (tests/conftest.py trains it) is reused, not trained again: the folder
    holds the trained model and its name carries the key of the recipe and template."""
    path = demo_model_dir()
    assert os.path.basename(path) == f"demo-{recipe_key(DEMO_RECIPE, DEMO_CHAT_TEMPLATE)}"
    mtime = os.path.getmtime(os.path.join(path, "model.safetensors"))
    assert demo_model_dir() == path and os.path.getmtime(os.path.join(path, "model.safetensors")) == mtime
    assert AutoTokenizer.from_pretrained(path).chat_template == DEMO_CHAT_TEMPLATE


def test_finding_the_trained_demo_imports_neither_torch_nor_transformers():
    """A demo server's launcher asks where the demo is: with the model trained, that costs no import
    of torch or transformers (seconds of CPU at every start)."""
    demo_model_dir()  # trained (the session's)
    code = ("import sys; from minisgl.demo.model import demo_model_dir; print(demo_model_dir()); "
            "print(sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == demo_model_dir() and out[1] == "[]", out


@pytest.mark.slow  # a process of its own
def test_a_first_start_waits_for_one_already_training_and_does_not_train_again(tmp_path):
    """Two first starts on one cache: the second waits on the lock the first holds while it
    trains, then finds the finished model and returns it, untrained by itself."""
    key = recipe_key(DEMO_RECIPE, DEMO_CHAT_TEMPLATE)
    with open(tmp_path / f"demo-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # "the first start", training
        second = start_in_own_group(
            [sys.executable, "-c", "from minisgl.demo.model import demo_model_dir; print(demo_model_dir())"],
            env={**os.environ, "MINISGL_CACHE": str(tmp_path), "MINISGL_LOG_LEVEL": "info"},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(10)  # the import and the key: a few seconds
            assert second.poll() is None, second.communicate()[0]
            shutil.copytree(demo_model_dir(), tmp_path / f"demo-{key}")  # what "the first" leaves
            fcntl.flock(lock, fcntl.LOCK_UN)
            output = second.communicate(timeout=120)[0]
        finally:
            end_group(second)
    assert second.returncode == 0 and output.strip().endswith(str(tmp_path / f"demo-{key}")), output
    assert "training" not in output


@pytest.fixture(scope="module")
def demo_server():
    """A server with no --model: the session's trained demo."""
    srv = ServerProcess("--num-pages", "256").wait_ready()
    try:
        yield srv
    finally:
        assert srv.stop() == 0


class CalendarEvent(BaseModel):
    name: str
    date: str
    participants: list[str]


class Animal(BaseModel):
    species: str
    legs: int
    wild: bool


@pytest.mark.slow
def test_the_demo_answers_a_plain_chat_briefly_and_stops(demo_server):
    client = openai.OpenAI(base_url=demo_server.url + "/v1", api_key="unused")
    reply = client.chat.completions.create(model="minisgl-demo", messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=32, temperature=0)
    assert reply.choices[0].finish_reason == "stop" and reply.choices[0].message.content.strip()


@pytest.mark.slow
@pytest.mark.parametrize("schema, question", [
    (CalendarEvent, "Alice and Bob are going to a science fair on Friday."), (Animal, "Describe a fox.")])
def test_openai_parse_gets_an_object_of_the_schema_within_64_tokens(demo_server, schema, question):
    client = openai.OpenAI(base_url=demo_server.url + "/v1", api_key="unused")
    reply = client.chat.completions.parse(model="minisgl-demo", messages=[{"role": "user", "content": question}],
                                          response_format=schema, max_tokens=64, temperature=0)
    assert reply.choices[0].finish_reason == "stop" and isinstance(reply.choices[0].message.parsed, schema)


@pytest.mark.slow
def test_langchain_gets_a_call_of_its_strict_tool_with_tool_choice_auto(demo_server):
    """A strict tool (OpenAI's strict: arguments in its schema) with tool_choice auto: the demo
    begins a call on its own, in its Hermes syntax; the server holds the call it begins to the
    offered names and schema (the demo does not learn to copy a name in its minute of training:
    without strict its call may name a tool that was not offered)."""

    @tool
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        return "sunny"

    model = ChatOpenAI(base_url=demo_server.url + "/v1", api_key="unused", model="minisgl-demo", max_tokens=64,
                       temperature=0, max_retries=0)
    reply = model.bind_tools([get_weather], strict=True, tool_choice="auto").invoke("What is the weather in Paris?")
    (call,) = reply.tool_calls
    assert call["name"] == "get_weather" and reply.response_metadata["finish_reason"] == "tool_calls"
    get_weather.args_schema.model_validate(call["args"])
    assert call["args"] == {"city": "Paris"}  # the value copied from the question


def test_the_test_session_builds_the_demo_in_the_checkout_not_the_users_cache():
    """Servers the tests start without --model use the demo in the checkout's .test-cache/
    (tests/conftest.py, git-ignored), never the user's ~/.cache."""
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    built = os.path.realpath(demo_model_dir())
    assert built.startswith(os.path.join(checkout, ".test-cache") + os.sep), built
    assert built.startswith(os.path.realpath(os.environ["MINISGL_CACHE"]) + os.sep)
    assert not built.startswith(os.path.realpath(os.path.expanduser("~/.cache")) + os.sep)
