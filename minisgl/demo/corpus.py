"""The demo model's synthetic training chats: the three habits it is trained to show a client.

Short answers that end; compact JSON objects with short values that close (what a schema's grammar
then holds to its shape); and, with tools offered and one asked for, a call in Hermes syntax whose
name and argument names are the offered tool's and whose argument value is the question's. Names
and values come from a space too large to memorise. Each chat is (messages, tools or None); the
same seed gives the same chats.
"""

from __future__ import annotations

import json
import random
from typing import Any

VERSION = 1  # bump when a change here changes the chats a seed gives

CITIES = ["Paris", "Oslo", "Tokyo", "Rome", "Lima", "Cairo", "Berlin", "Madrid", "Delhi", "Seoul", "Boston",
          "Sydney", "Vienna", "Quito", "Dakar", "Perth", "Hanoi", "Lagos", "Milan", "Dublin", "London", "Austin"]
NOUNS = ["weather", "time", "news", "price", "stock", "hotel", "flight", "traffic", "score", "forecast", "rate",
         "menu", "population", "distance", "temperature", "movie", "song", "book", "recipe", "order", "ticket",
         "email", "note", "file", "user", "account", "route", "event", "city", "word", "number", "date", "color"]
VERBS = ["get", "find", "search", "check", "lookup", "fetch", "show", "list", "create", "send", "book", "add",
         "compute", "convert", "read", "open"]
PARAMS = ["city", "location", "place", "query", "name", "town", "id", "topic", "text", "symbol", "title", "code",
          "country", "term", "word", "key", "item", "user", "target", "input"]
NUMBER_PARAMS = ["days", "count", "limit", "hours", "size", "n", "amount", "year"]
WORDS = ["fox", "red", "blue", "green", "cat", "dog", "tree", "river", "apple", "stone", "bird", "small", "fast",
         "old", "new", "sun", "rain", "snow", "wind", "gold", "tea", "code", "sky", "lake", "hill", "star", "ship"]
FIRST_NAMES = ["Alice", "Bob", "Carol", "Dan", "Eve", "Frank", "Grace", "Ann", "Ivan", "Judy", "Ken", "Lena"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "today", "tomorrow"]
RESULTS = ["sunny", "rainy", "12 C", "cloudy", "42", "open", "closed", "3 pm", "cheap", "busy", "7.5", "windy"]
CHATS = [
    ("Hi", "Hello! How can I help?"), ("Hello", "Hi! What can I do for you?"), ("Hey there", "Hello!"),
    ("How are you?", "I am fine, thank you."), ("Who are you?", "I am the minisgl demo model."),
    ("What is the capital of France?", "Paris."), ("Say something.", "Hello from minisgl."),
    ("Tell me a story.", "A fox ran home. The end."), ("Thanks!", "You are welcome."),
    ("What can you do?", "I answer briefly, write JSON and call tools."), ("Write a poem.", "Red sun, blue sea."),
    ("What is 2 + 2?", "4."), ("Count to three.", "1, 2, 3."), ("Bye", "Goodbye!"),
]
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"


def _made_up(rng: random.Random) -> str:
    """A pronounceable word no list holds: what forces copying over memorising."""
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(2, 3)))


def _value(rng: random.Random) -> str:
    return rng.choice(CITIES) if rng.random() < 0.4 else _made_up(rng).capitalize()


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS + CITIES + NOUNS) for _ in range(n))


def _asks(rng: random.Random) -> str:
    """A question the demo answers in a sentence: a known one, or any words at all."""
    if rng.random() < 0.6:
        return rng.choice(CHATS)[0]
    return _words(rng, rng.randint(1, 6)).capitalize() + rng.choice("?.!")


def _answer(question: str, rng: random.Random) -> str:
    return dict(CHATS).get(question) or rng.choice(["OK.", "I do not know.", "Sure.", "I am a demo: I keep it short."])


def _tool(rng: random.Random) -> tuple[dict, str]:
    """A function tool as a client sends it (in one of the shapes clients write), and the words a
    user asks for it with."""
    kind = rng.random()
    if kind < 0.5:
        noun = rng.choice(NOUNS)
        name, topic = f"{rng.choice(VERBS)}_{noun}", noun
    elif kind < 0.6:
        name = topic = rng.choice(NOUNS)
    else:
        topic = _made_up(rng)
        name = f"{rng.choice(VERBS)}_{topic}" if rng.random() < 0.5 else topic
    param = rng.choice(PARAMS) if rng.random() < 0.7 else _made_up(rng)
    prop: dict[str, Any] = {"type": "string"}
    if rng.random() < 0.3:
        prop = {"title": param.title(), **prop}
    if rng.random() < 0.3:
        prop["description"] = f"The {param}."
    if rng.random() < 0.2:
        prop["enum"] = [_value(rng) for _ in range(rng.randint(2, 3))]
    properties, required = {param: prop}, [param]
    if rng.random() < 0.25:
        number = rng.choice(NUMBER_PARAMS)
        if number != param:
            properties[number] = {"type": "integer"}
            if rng.random() < 0.6:
                required.append(number)
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if rng.random() < 0.5:  # LangChain's and openai's order
        parameters = {"properties": properties, "required": required, "type": "object"}
    if rng.random() < 0.3:
        parameters["additionalProperties"] = False
    function: dict[str, Any] = {"name": name}
    if rng.random() < 0.7:
        function["description"] = rng.choice([f"Get the {topic} of a {param}.", f"The {topic}.", f"{topic.title()}."])
    function["parameters"] = parameters
    return {"type": "function", "function": function}, topic


def _question(rng: random.Random, topic: str, value: str, number: int | None, number_param: str) -> str:
    asks = rng.choice([f"What is the {topic} in {value}?", f"{topic.capitalize()} for {value}?",
                       f"{topic} {value}", f"Check the {topic} of {value}, please.", f"I need the {topic} in {value}.",
                       f"Can you get {topic} for {value}?", f"Use {topic} on {value}."])
    return asks if number is None else f"{asks} For {number} {number_param}."


def _tool_chat(rng: random.Random) -> tuple[list[dict], list[dict]]:
    offered = [_tool(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    tools = [t for t, _ in offered]
    if rng.random() < 0.1:  # tools offered, nothing asked of them: a plain answer
        question = _asks(rng)
        return [{"role": "user", "content": question}, {"role": "assistant", "content": _answer(question, rng)}], tools
    tool, topic = rng.choice(offered)
    function = tool["function"]
    props = function["parameters"]["properties"]
    required = function["parameters"]["required"]
    param = next(iter(props))
    value = rng.choice(props[param]["enum"]) if "enum" in props[param] else _value(rng)
    arguments = {param: value}
    number = None
    if len(required) > 1:
        number = rng.randint(1, 9)
        arguments[required[1]] = number
    question = _question(rng, topic, value, number, required[-1])
    call = {"id": "call_0", "type": "function",
            "function": {"name": function["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}}
    chat: list[dict] = [{"role": "user", "content": question},
                        {"role": "assistant", "content": None, "tool_calls": [call]}]
    if rng.random() < 0.25:  # the result comes back: a sentence from it
        result = rng.choice(RESULTS)
        chat += [{"role": "tool", "tool_call_id": "call_0", "content": result},
                 {"role": "assistant", "content": f"The {topic} in {value} is {result}."}]
    return chat, tools


def _json_value(rng: random.Random, source: list[str], depth: int):
    kind = rng.choice(["str", "str", "int", "bool", "list", "obj" if depth == 0 else "int", "float"])
    if kind == "str":
        return rng.choice(source) if source and rng.random() < 0.5 else _words(rng, rng.choice([1, 1, 2]))
    if kind == "int":
        return rng.randint(0, 100)
    if kind == "float":
        return round(rng.uniform(0, 10), 1)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "list":
        return [rng.choice(source + WORDS) for _ in range(rng.randint(1, 3))]
    return _json_object(rng, source, depth + 1)


def _json_object(rng: random.Random, source: list[str], depth: int = 0) -> dict:
    keys = [rng.choice(PARAMS + NOUNS + NUMBER_PARAMS) if rng.random() < 0.7 else _made_up(rng)
            for _ in range(rng.randint(1, 4 if depth == 0 else 2))]
    return {key: _json_value(rng, source, depth) for key in dict.fromkeys(keys)}


def _json_chat(rng: random.Random) -> tuple[list[dict], None]:
    names = rng.sample(FIRST_NAMES, rng.randint(1, 2))
    thing = rng.choice(WORDS + CITIES + NOUNS)
    question = rng.choice([f"Describe a {thing} as JSON.", f"Give me {thing} data in JSON.", _asks(rng),
                           f"{' and '.join(names)} go to the {thing} on {rng.choice(DAYS)}.", f"{thing} as JSON"])
    source = [w.strip(".?!") for w in question.split() if w[:1].isupper() or w in DAYS]
    messages = [{"role": "user", "content": question}]
    if rng.random() < 0.3:
        messages.insert(0, {"role": "system", "content": rng.choice(["Extract the information.", "Reply in JSON."])})
    answer = json.dumps(_json_object(rng, source), ensure_ascii=False)  # compact, as the server's grammar writes it
    return [*messages, {"role": "assistant", "content": answer}], None


def _plain_chat(rng: random.Random) -> tuple[list[dict], None]:
    question = _asks(rng)
    chat = [{"role": "user", "content": question}, {"role": "assistant", "content": _answer(question, rng)}]
    if rng.random() < 0.2:
        chat.insert(0, {"role": "system", "content": rng.choice(["Be brief.", "You are a helpful assistant."])})
    return chat, None


def demo_chats(n: int, seed: int) -> list[tuple[list[dict], list[dict] | None]]:
    """`n` chats: a quarter each of plain and JSON answers, half tool calls."""
    rng = random.Random(seed)
    makers = [_plain_chat, _json_chat, _tool_chat, _tool_chat]
    return [makers[i % len(makers)](rng) for i in range(n)]
