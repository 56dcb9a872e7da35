"""The demo model's synthetic chats: seeded, a quarter plain answers, a quarter JSON, half tool
chats, whose calls name an offered tool with arguments in its schema, the value from the question."""

from __future__ import annotations

import json

import jsonschema

from minisgl.demo.corpus import demo_chats


def test_the_same_seed_gives_the_same_chats_and_another_seed_others():
    assert demo_chats(40, seed=0) == demo_chats(40, seed=0)
    assert demo_chats(40, seed=0) != demo_chats(40, seed=1)


def test_a_quarter_of_the_chats_answer_in_words_a_quarter_in_json_and_half_are_offered_tools():
    chats = demo_chats(400, seed=0)
    offered = [chat for chat, tools in chats if tools]
    answers = [chat[-1]["content"] for chat, tools in chats if not tools]
    in_json = [a for a in answers if a.startswith("{")]
    assert len(offered) == 200 and len(in_json) == 100
    for answer in in_json:  # compact, as the server's grammar writes JSON
        assert json.dumps(json.loads(answer), ensure_ascii=False) == answer
    assert all(len(a.split()) <= 12 for a in answers if a not in in_json)  # brief


def test_a_call_names_an_offered_tool_with_arguments_in_its_schema_and_the_value_of_the_question():
    calls = 0
    for chat, tools in demo_chats(400, seed=3):
        if not tools or not chat[1].get("tool_calls"):
            continue
        (call,) = chat[1]["tool_calls"]
        functions = {t["function"]["name"]: t["function"] for t in tools}
        arguments = json.loads(call["function"]["arguments"])
        jsonschema.validate(arguments, functions[call["function"]["name"]]["parameters"])
        assert next(iter(arguments.values())) in chat[0]["content"]
        calls += 1
    assert calls > 150


def test_tool_names_and_values_are_too_many_to_memorise():
    names = {t["function"]["name"] for _, tools in demo_chats(2000, seed=0) for t in tools or ()}
    assert len(names) > 500
