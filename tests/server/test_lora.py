"""LoRA adapters over the OpenAI API: `--lora-modules name=path` serves each adapter under its name
(a request's `model` selects it, and the response names it), /v1/models lists each with the base
model as its `parent`, an unknown name is a 404 naming it, /metrics counts each adapter's requests,
and an adapter the engine cannot serve stops the server at start with the reason."""

from __future__ import annotations

import subprocess
import sys

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from minisgl.server.args import parse_args
from tests.lora.peft_adapters import build_adapters, peft_greedy
from tests.server.serving import ServerProcess

PROMPT = [5, 17, 42, 99, 3, 250, 251]


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM")


@pytest.fixture(scope="module")
def adapters(model_dir, tmp_path_factory):
    return build_adapters(model_dir, tmp_path_factory.mktemp("lora"))


@pytest.fixture(scope="module")
def server(model_dir, adapters):
    srv = ServerProcess("--model", model_dir, "--served-model-name", "base", "--dtype", "float32", "--page-size", "4",
                        "--num-pages", "256", "--lora-modules", f"r4={adapters['r4']}", f"r16={adapters['r16']}"
                        ).wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")


def test_the_model_field_selects_the_adapter_and_the_response_names_it(client, model_dir, adapters):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for model, adapter in (("r4", adapters["r4"]), ("r16", adapters["r16"]), ("base", None)):
        reply = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0,
                                          extra_body={"ignore_eos": True, "skip_special_tokens": False})
        assert reply.model == model
        assert reply.choices[0].text == tokenizer.decode(peft_greedy(model_dir, adapter, PROMPT, 8)), model
    chat = client.chat.completions.create(model="r16", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert chat.model == "r16"


def test_models_lists_each_adapter_with_its_parent(client, adapters):
    cards = {m.id: m.model_dump() for m in client.models.list().data}
    assert list(cards) == ["base", "r4", "r16"]
    assert cards["r4"]["parent"] == cards["r16"]["parent"] == "base" and cards["base"]["parent"] is None
    assert cards["r4"]["root"] == adapters["r4"]


def test_an_unknown_adapter_is_a_404_naming_it(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="r8", prompt=PROMPT, max_tokens=2)
    assert "the model 'r8' does not exist" in str(e.value) and "'r4', 'r16'" in str(e.value)
    assert e.value.body["param"] == "model"


def test_metrics_count_each_adapters_requests(server, client):
    def count(name: str) -> float:
        text = httpx.get(server.url + "/metrics", timeout=10).text
        line = next((x for x in text.splitlines()
                     if x.startswith("minisgl_lora_requests_total{") and f'lora_name="{name}"' in x), None)
        return float(line.rsplit(" ", 1)[1]) if line else 0.0

    before = count("r4")
    client.completions.create(model="r4", prompt=PROMPT, max_tokens=2, n=2)
    assert count("r4") == before + 2  # one per choice
    client.completions.create(model="base", prompt=PROMPT, max_tokens=2)
    assert count("r4") == before + 2


@pytest.mark.parametrize("argv, says", [
    (["--lora-modules", "r4"], "--lora-modules takes name=path, got 'r4'"),
    (["--lora-modules", "a=/x", "a=/y"], "--lora-modules names 'a' twice"),
    (["--served-model-name", "m", "--lora-modules", "m=/x"], "'m' is already the base model's name"),
])
def test_bad_lora_flags_are_refused(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_an_adapter_above_max_lora_rank_stops_the_server_with_the_reason(model_dir, adapters):
    run = subprocess.run([sys.executable, "-m", "minisgl", "--model", model_dir, "--num-pages", "64",
                          "--lora-modules", f"r16={adapters['r16']}", "--max-lora-rank", "8"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "LoRA adapter 'r16'" in run.stderr and "rank 16 exceeds max_lora_rank 8 (--max-lora-rank)" in run.stderr
