"""The examples a newcomer copies first do what they say: the README's Python snippet and curl
command against the demo server (each prints the model's answer), and docs/serving.md's offline
`LLM` on the built-in demo, which needs no Hub."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.serving import ServerProcess

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ADDRESS = "127.0.0.1:1919"


def blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", (REPO / page).read_text(), re.S | re.M)


def one_block(page: str, language: str, holding: str) -> str:
    found = [b for b in blocks(page, language) if holding in b]
    assert len(found) == 1, f"{page}: {len(found)} {language} blocks hold {holding!r}"
    return found[0]


@pytest.fixture(scope="module")
def demo_server():
    srv = ServerProcess().wait_ready()  # no --model: the built-in demo, as the quick start runs it
    yield srv
    assert srv.stop() == 0


@pytest.mark.slow
def test_the_readmes_python_snippet_prints_the_answer(demo_server):
    code = one_block("README.md", "python", "OpenAI(").replace(DEFAULT_ADDRESS, f"127.0.0.1:{demo_server.port}")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip(), "the snippet printed nothing"


@pytest.mark.slow
def test_the_readmes_curl_command_answers_with_a_chat_completion(demo_server):
    command = one_block("README.md", "bash", "curl ").replace(DEFAULT_ADDRESS, f"127.0.0.1:{demo_server.port}")
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    reply = json.loads(run.stdout)
    assert reply["object"] == "chat.completion" and reply["model"] == "minisgl-demo"
    assert reply["choices"][0]["message"]["content"] and reply["usage"]["completion_tokens"] <= 32


@pytest.mark.slow  # loads the demo in a process of its own (a minute on a busy CPU)
def test_the_offline_llm_example_runs_on_the_demo_without_the_hub():
    code = one_block("docs/serving.md", "python", "demo_model_dir")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip()
