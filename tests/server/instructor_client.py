"""Run by tests/server/test_tool_clients.py with the Python of instructor's own virtual environment
(tests/tools/instructor.sh): instructor's TOOLS, PARALLEL_TOOLS, JSON_SCHEMA and RESPONSES_TOOLS
modes against the server, each result printed in one JSON object. Imports neither minisgl nor the
tests: that environment has only instructor (and the openai version it pins).

usage: python instructor_client.py BASE_URL MODEL HERMES_REGEX"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Literal

import instructor
import openai
from pydantic import BaseModel


class Weather(BaseModel):
    city: Literal["Paris", "Oslo"]
    days: int


class Time(BaseModel):
    zone: Literal["UTC", "CET"]


def run(client: openai.OpenAI, model: str, mode: instructor.Mode, **kw) -> list[dict]:
    """What one mode returns, as the models' dicts (with their class names), or the failure."""
    patched = instructor.from_openai(client, mode=mode)
    try:
        if mode == instructor.Mode.RESPONSES_TOOLS:
            out = patched.responses.create(model=model, input="Weather in Paris?", response_model=Weather,
                                           max_retries=0, **kw)
        else:
            response_model = Iterable[Weather | Time] if mode == instructor.Mode.PARALLEL_TOOLS else Weather
            out = patched.chat.completions.create(model=model, messages=[{"role": "user", "content": "Weather?"}],
                                                  response_model=response_model, max_retries=0, **kw)
    except Exception as e:  # noqa: BLE001 - the test reports what instructor raised
        return [{"error": f"{type(e).__name__}: {e}"}]
    return [{"type": type(o).__name__, **o.model_dump()} for o in ([out] if isinstance(out, BaseModel) else list(out))]


def main() -> None:
    base, model, hermes_regex = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base, api_key="unused")
    results = {
        "tools": run(client, model, instructor.Mode.TOOLS, temperature=1.0, seed=0, max_tokens=100),
        "parallel_tools": run(client, model, instructor.Mode.PARALLEL_TOOLS, temperature=1.0, seed=0, max_tokens=200,
                              extra_body={"guided_regex": hermes_regex}),
        "responses_tools": run(client, model, instructor.Mode.RESPONSES_TOOLS, temperature=1.0, max_output_tokens=100),
        **{f"json_schema_{seed}": run(client, model, instructor.Mode.JSON_SCHEMA, temperature=1.0, seed=seed,
                                      max_tokens=100) for seed in range(4)},
    }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
