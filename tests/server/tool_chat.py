"""What the tool-calling server tests share: a chat template that renders tools, two function
tools with enum-bounded arguments, and the user turn that asks for them."""

# A ChatML template that renders tools and earlier tool calls, as Qwen's does, and honours
# enable_thinking (an empty think block closes thinking, as in Qwen3's template).
TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content %}{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments}"
    " | tojson }}\n</tool_call>{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                                       "required": ["zone"], "additionalProperties": False}}}
CHAT = [{"role": "user", "content": "Weather in Paris?"}]

# A Llama-3.2-style template: tools listed in the system turn with the JSON call format, earlier
# calls rendered as that JSON, tool results in ipython turns. No <tool_call> and no <|python_tag|>:
# the "parameters" key is what marks Llama's JSON calls.
LLAMA3_TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\n{% if tools %}Given the following functions, please respond with "
    "a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the "
    'format {"name": function name, "parameters": dictionary of argument name and its value}.\n\n'
    "{% for t in tools %}{{ t | tojson }}\n\n{% endfor %}{% endif %}<|eot_id|>"
    "{% for m in messages %}{% if m.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{% if m.content %}{{ m.content }}{% endif %}{% for c in m.tool_calls or [] %}"
    '{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}{% endfor %}<|eot_id|>'
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def streamed_calls(chunks) -> list:
    """The tool calls of a chat stream (the openai client's chunks) joined as clients join them:
    by index, the id, type and name from a call's first delta, which has no arguments yet; each
    later delta only more arguments text. The calls come back in the client's own type."""
    from openai.types.chat import ChatCompletionMessageToolCall

    calls: dict[int, dict] = {}
    for delta in (tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])):
        if delta.index not in calls:
            assert delta.id and delta.type == "function" and delta.function.name and not delta.function.arguments
            calls[delta.index] = {"id": delta.id, "type": "function",
                                  "function": {"name": delta.function.name, "arguments": ""}}
        else:
            assert delta.id is None and delta.function.name is None and delta.function.arguments
        calls[delta.index]["function"]["arguments"] += delta.function.arguments
    return [ChatCompletionMessageToolCall.model_validate(c) for c in calls.values()]
