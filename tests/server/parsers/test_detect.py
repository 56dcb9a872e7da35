"""Which tool-call parser a server without --tool-call-parser uses: the syntax the model's chat
template writes calls in, else the one its architecture is trained on; a template that renders no
tools, or calls in a syntax no parser reads, gets none, with the reason a request is told."""

from __future__ import annotations

import dataclasses

from minisgl.demo.model import CHAT_TEMPLATE
from minisgl.server.args import ServerArgs
from minisgl.server.parsers import TOOL_PARSERS, choose_tool_parser, tool_parser_for
from minisgl.server.parsers.detect import model_template_and_architecture
from tests.server.tool_chat import LLAMA3_TEMPLATE, TEMPLATE

# Llama 3.1's own template: built-in tools are called after <|python_tag|>, others as JSON.
LLAMA31_EXCERPT = ("{%- if tools is not none %}{%- set tools_in_user_message = true %}{%- endif %}"
                   "{%- if builtin_tools is defined %}{{- '<|python_tag|>' + tool_call.name + '.call(' }}{%- endif %}"
                   "{{- '{\"name\": \"' + tool_call.name + '\", ' }}{{- '\"parameters\": ' }}")
# Mistral's: calls after [TOOL_CALLS], which minisgl has no parser for.
MISTRAL_EXCERPT = "{%- if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{%- endif %}[TOOL_CALLS]"
# Qwen3-Coder's template: XML calls inside <tool_call> (which alone would read as hermes).
QWEN3_CODER_EXCERPT = ("{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
                       "{% for c in m.tool_calls %}<tool_call>\n<function={{ c.function.name }}>\n"
                       "{% for k, v in c.function.arguments.items() %}<parameter={{ k }}>\n{{ v }}\n</parameter>\n"
                       "{% endfor %}</function>\n</tool_call>{% endfor %}")
KIMI_EXCERPT = "{% if tools %}{{ tools | tojson }}{% endif %}<|tool_calls_section_begin|><|tool_call_begin|>"
# Tools described in words only.
WORDS_ONLY = "{% if tools %}You may call these functions: {{ tools | tojson }}{% endif %}{{ messages }}"


def test_the_template_syntax_picks_the_parser():
    assert choose_tool_parser(TEMPLATE, "LlamaForCausalLM").parser == "hermes"  # the template wins
    assert choose_tool_parser(LLAMA31_EXCERPT, "LlamaForCausalLM").parser == "llama3_json"
    assert choose_tool_parser(LLAMA3_TEMPLATE, "LlamaForCausalLM").parser == "llama3_json"
    assert "<tool_call>" in choose_tool_parser(TEMPLATE, None).why


def test_a_template_without_syntax_falls_back_to_the_architecture():
    assert choose_tool_parser(WORDS_ONLY, "Qwen3ForCausalLM").parser == "hermes"
    assert choose_tool_parser(WORDS_ONLY, "Qwen2ForCausalLM").parser == "hermes"
    assert choose_tool_parser(WORDS_ONLY, "LlamaForCausalLM").parser == "llama3_json"
    unknown = choose_tool_parser(WORDS_ONLY, "MistralForCausalLM")
    assert unknown.parser is None and "MistralForCausalLM" in unknown.why


def test_no_tools_or_an_unread_syntax_gives_no_parser_and_says_why():
    for template in (CHAT_TEMPLATE, None, ""):
        choice = choose_tool_parser(template, "Qwen3ForCausalLM")
        assert choice.parser is None and "does not render tools" in choice.why
    kimi = choose_tool_parser(KIMI_EXCERPT, "DeepseekV3ForCausalLM")
    assert kimi.parser is None and "Kimi's / DeepSeek's" in kimi.why


def test_qwen3_coder_and_mistral_templates_pick_their_parsers():
    assert choose_tool_parser(QWEN3_CODER_EXCERPT, "Qwen3MoeForCausalLM").parser == "qwen3_coder"  # not hermes
    assert choose_tool_parser(MISTRAL_EXCERPT, "MistralForCausalLM").parser == "mistral"


def test_every_choice_is_a_parser_the_server_has():
    for template in (TEMPLATE, LLAMA31_EXCERPT, LLAMA3_TEMPLATE, WORDS_ONLY):
        for arch in ("Qwen3ForCausalLM", "LlamaForCausalLM"):
            assert choose_tool_parser(template, arch).parser in TOOL_PARSERS


def test_the_model_directory_gives_its_template_and_architecture(tiny_model_dir):
    path = tiny_model_dir("LlamaForCausalLM")
    template, architecture = model_template_and_architecture(path, None)
    assert template == CHAT_TEMPLATE and architecture == "LlamaForCausalLM"
    assert model_template_and_architecture(path, LLAMA3_TEMPLATE)[0] == LLAMA3_TEMPLATE  # --chat-template wins


def test_the_flag_overrides_and_chat_template_flag_is_read(tiny_model_dir):
    args = ServerArgs(model=tiny_model_dir("Qwen3ForCausalLM"))
    assert tool_parser_for(args).parser is None  # the tiny models' template renders no tools
    assert tool_parser_for(dataclasses.replace(args, chat_template=TEMPLATE)).parser == "hermes"
    forced = tool_parser_for(dataclasses.replace(args, chat_template=TEMPLATE, tool_call_parser="llama3_json"))
    assert forced.parser == "llama3_json" and forced.why == "--tool-call-parser"
