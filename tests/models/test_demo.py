"""The built-in demo model (`python -m minisgl` with no --model): a chat template that renders tools
in Qwen's Hermes syntax, so tool_choice auto works on a server started with no flags; a demo cached
by an earlier version gets that template too."""

from __future__ import annotations

import json
import os

import openai
import pytest
from transformers import AutoTokenizer

from minisgl.models.demo import CHAT_TEMPLATE, DEMO_CHAT_TEMPLATE, demo_model_dir
from minisgl.server.args import ServerArgs
from minisgl.server.parsers import tool_parser_for
from tests.server.serving import ServerProcess
from tests.server.tool_chat import CHAT, WEATHER


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A demo cache of this module's own (the user's is left alone)."""
    return str(tmp_path_factory.mktemp("minisgl-cache"))


def test_the_demo_renders_tools_and_calls_as_qwen_and_plain_chats_as_before(cache, monkeypatch):
    monkeypatch.setenv("MINISGL_CACHE", cache)
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


def test_a_demo_cached_by_an_earlier_version_gets_the_tool_template(cache, monkeypatch):
    monkeypatch.setenv("MINISGL_CACHE", cache)
    template = os.path.join(demo_model_dir(), "chat_template.jinja")
    with open(template, "w") as f:
        f.write(CHAT_TEMPLATE)  # what earlier versions wrote
    with open(os.path.join(demo_model_dir(), "chat_template.jinja")) as f:
        assert f.read() == DEMO_CHAT_TEMPLATE


@pytest.mark.slow
def test_the_demo_server_calls_tools_with_tool_choice_auto(cache):
    srv = ServerProcess("--num-pages", "256", env={"MINISGL_CACHE": cache}).wait_ready()
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        assert "tool-call parser: hermes" in srv.output()
        plain = client.chat.completions.create(model="minisgl-demo", messages=CHAT, tools=[WEATHER], max_tokens=8)
        assert plain.choices[0].message.tool_calls is None  # a random model answers in words; no 400
        # The demo's own call syntax, generated, comes back as a call.
        regex = r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "(Paris|Oslo)", "days": [1-7]\}\}' \
                r'\n</tool_call>'
        called = client.chat.completions.create(model="minisgl-demo", messages=CHAT, tools=[WEATHER], max_tokens=200,
                                                extra_body={"guided_regex": regex})
        (call,) = called.choices[0].message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Paris", "Oslo")
        assert called.choices[0].finish_reason == "tool_calls" and not called.choices[0].message.content
    finally:
        assert srv.stop() == 0


def test_the_test_session_builds_the_demo_outside_the_users_home():
    """Servers the tests start without --model write their demo under the session's temp folder
    (tests/conftest.py), never into ~/.cache."""
    home = os.path.realpath(os.path.expanduser("~"))
    built = os.path.realpath(demo_model_dir())
    assert not built.startswith(home + os.sep), built
    assert built.startswith(os.path.realpath(os.environ["MINISGL_CACHE"]) + os.sep)
