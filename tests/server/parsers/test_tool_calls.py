"""The tool-call syntaxes of Qwen3-Coder (XML: <function=...> with <parameter=...> values) and
Mistral ([TOOL_CALLS], both its JSON-list and its NAME[ARGS] forms) read back into OpenAI
tool_calls, whole and streamed alike; text that is not a well-formed call stays content."""

from __future__ import annotations

import json

import pytest

from minisgl.server.parsers import ChatOutputFormat
from tests.server.test_parsers import _stream

QWEN3_CODER = ("Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
               "<parameter=days>\n3\n</parameter>\n<parameter=units>\n{\"temp\": \"C\"}\n</parameter>\n</function>\n"
               "</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n"
               "</tool_call>")
CODER_CALLS = [("get_weather", {"city": "San Francisco", "days": 3, "units": {"temp": "C"}}), ("get_time", {"zone": "UTC"})]
MISTRAL_LIST = 'Sure. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", ' \
               '"arguments": {}}]'
MISTRAL_ARGS = '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_time[ARGS]{}'
MISTRAL_CALLS = [("get_weather", {"city": "Oslo"}), ("get_time", {})]


def _calls(calls: list[dict]) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("parser, text, content, calls", [
    ("qwen3_coder", QWEN3_CODER, "Let me check.", CODER_CALLS),
    ("mistral", MISTRAL_LIST, "Sure.", MISTRAL_CALLS),
    ("mistral", MISTRAL_ARGS, None, MISTRAL_CALLS),
])
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_calls_are_read_whole_and_streamed(parser, text, content, calls, step):
    fmt = ChatOutputFormat(tool_parser=parser)
    message, reason = fmt.reader().message(text, "stop")
    assert message["content"] == content and _calls(message["tool_calls"]) == calls and reason == "tool_calls"
    _, streamed_content, streamed_calls, reason = _stream(fmt, text, step)
    assert streamed_content.strip() == (content or "") and _calls(streamed_calls) == calls and reason == "tool_calls"


@pytest.mark.parametrize("parser, text", [
    ("qwen3_coder", "A plain answer about <function> words."),
    ("qwen3_coder", "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n"),  # cut before its end
    ("mistral", "A plain answer."),
    ("mistral", '[TOOL_CALLS]get_time[ARGS]{"zone": '),  # cut inside the arguments
    ("mistral", '[TOOL_CALLS]{"city": "Oslo"}'),  # no name
])
def test_text_that_is_not_a_well_formed_call_stays_content(parser, text):
    message, reason = ChatOutputFormat(tool_parser=parser).reader().message(text, "stop")
    assert message["content"] == text and "tool_calls" not in message and reason == "stop"


@pytest.mark.slow  # starts the server: out of the fast loop (tests/test_tiers.py)
def test_a_qwen3_coder_templated_server_takes_tool_choice_auto(tiny_model_dir, tmp_path):
    """Before these parsers, tool_choice auto was refused for such a model (no parser read its calls)."""
    import openai

    from tests.server.serving import ServerProcess
    from tests.server.tool_chat import CHAT, WEATHER

    template = tmp_path / "qwen3_coder.jinja"
    template.write_text(QWEN3_CODER_TEMPLATE)
    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM"), "--served-model-name", "coder", "--dtype",
                        "float32", "--num-pages", "256", "--chat-template", str(template)).wait_ready()
    try:
        assert "qwen3_coder" in srv.output()  # the parser chosen, logged at start
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        choice = client.chat.completions.create(model="coder", messages=CHAT, tools=[WEATHER], tool_choice="auto",
                                                max_tokens=8, temperature=0).choices[0]
        assert choice.finish_reason in ("stop", "length", "tool_calls")
    finally:
        assert srv.stop() == 0


# A ChatML template that renders tools and earlier calls in Qwen3-Coder's XML.
QWEN3_CODER_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n"
    "Call a function as <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>"
    "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content %}{{ m.content }}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
