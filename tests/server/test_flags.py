"""The flags users look for (vLLM's names too), each validated before any worker loads the model, and the
extension routes: /tokenize, /detokenize, several served names, CORS, the model's sampling
defaults."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from minisgl.server.args import parse_args
from tests.helpers import refused_flags
from tests.server.serving import ServerProcess


def test_vllm_flag_names_are_aliases():
    args = parse_args(["--tensor-parallel-size", "2", "--max-model-len", "300", "--gpu-memory-utilization", "0.5",
                       "--dtype", "half", "--served-model-name", "a", "b"])
    assert (args.tp, args.max_seq_len, args.memory_ratio, args.dtype) == (2, 300, 0.5, "float16")
    assert args.model_names == ("a", "b") and args.model_name == "a"


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minisgl", *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv, says", [
    (["--log-level", "verbose"], "--log-level"),
    (["--attn", "bogus"], "bogus"),
    (["--moe-backend", "bogus"], "--moe-backend"),
    (["--chat-template", "/no/such/file"], "--chat-template"),
    (["--generation-config", "/no/such/dir"], "--generation-config"),
    (["--tool-call-parser", "nope"], "--tool-call-parser"),
    (["--allowed-origins", "[oops"], "--allowed-origins"),
    (["--port", "70000"], "--port"),
    (["--prefill-delay-steps", "-1"], "--prefill-delay-steps"),
    (["--piecewise-cuda-graph-max-tokens", "-1"], "--piecewise-cuda-graph-max-tokens"),
])
def test_bad_flags_exit_2_with_one_line_as_they_are_parsed(argv, says, capsys):
    """Checked in this process: `python -m minisgl` parses its flags first, with this same function
    (minisgl/__main__.py), so a bad flag stops it before torch is imported or anything starts."""
    stderr = refused_flags(argv, capsys)
    lines = [line for line in stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("minisgl: error:"), stderr


@pytest.mark.slow
def test_a_flag_checked_against_the_model_exits_2_with_one_line_before_any_worker_loads():
    """The end-to-end form, through the real command: --max-seq-len is checked against the model's
    context length at launch, after parsing, and still before any worker starts."""
    run = _run("--max-seq-len", "100000000")
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert len(lines) == 1 and "context length" in lines[0] and lines[0].startswith("minisgl: error:"), run.stderr
    assert "started worker" not in run.stderr + run.stdout


@pytest.mark.slow
def test_device_cuda_without_a_gpu_is_refused_up_front():
    import torch

    run = _run("--device", "cuda")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the flag is valid here")
    assert run.returncode == 2 and "no CUDA GPU" in run.stderr and "Traceback" not in run.stderr


def _imported(importtime_log: str) -> set[str]:
    """The modules `python -X importtime` reported importing."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_log.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("flag, says", [("--version", "minisgl "), ("--help", "usage: ")])
def test_version_and_help_answer_without_importing_torch(flag, says):
    """They answer at once: torch (and the server behind it) is imported only to serve."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "minisgl", flag], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.startswith(says), run.stderr[-2000:]
    imported = _imported(run.stderr)
    assert "minisgl.server.args" in imported and "torch" not in imported and "minisgl.server.launch" not in imported


def test_every_flag_help_renders_as_written():
    """argparse %-formats each help (a bare % there prints the flag's whole definition instead): each
    flag's text shows in --help as the declaration words it."""
    from minisgl.server.args import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "option_strings" not in text
    assert "every prefill eager. (default: 0)" in text


@pytest.fixture(scope="module")
def greedy_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model, its generation_config.json asking for greedy decoding (top_k 1)."""
    path = tmp_path_factory.mktemp("greedy") / "model"
    shutil.copytree(tiny_model_dir("Qwen3ForCausalLM"), path)
    config = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**config, "top_k": 1, "temperature": 0.9}))
    return str(path)


@pytest.fixture(scope="module")
def server(greedy_model_dir):
    srv = ServerProcess("--model", greedy_model_dir, "--served-model-name", "first", "second", "--num-pages", "512",
                        "--allowed-origins", "https://app.example").wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.mark.slow
def test_every_served_name_works_and_is_listed(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["first", "second"]
    for name in ("first", "second"):
        assert client.completions.create(model=name, prompt="hi", max_tokens=2).model == "first"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="third", prompt="hi", max_tokens=2)


@pytest.mark.slow
def test_cors_preflight_allows_only_the_given_origin(server):
    def preflight(origin):
        return httpx.options(server.url + "/v1/completions", timeout=10, headers={
            "Origin": origin, "Access-Control-Request-Method": "POST"})

    assert preflight("https://app.example").headers.get("access-control-allow-origin") == "https://app.example"
    assert "access-control-allow-origin" not in preflight("https://evil.example").headers


@pytest.mark.slow
def test_tokenize_and_detokenize_match_the_tokenizer_and_the_request(server, greedy_model_dir):
    tok = AutoTokenizer.from_pretrained(greedy_model_dir)
    text = "The quick brown fox"
    got = httpx.post(server.url + "/tokenize", json={"prompt": text}, timeout=30).json()
    assert got == {"tokens": tok.encode(text), "count": len(tok.encode(text))}
    messages = [{"role": "user", "content": "Hello"}]
    chat = httpx.post(server.url + "/tokenize", json={"model": "second", "messages": messages}, timeout=30).json()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    used = client.chat.completions.create(model="first", messages=messages, max_tokens=1).usage.prompt_tokens
    assert chat["count"] == used == len(tok.apply_chat_template(messages, add_generation_prompt=True)["input_ids"])
    back = httpx.post(server.url + "/detokenize", json={"tokens": got["tokens"]}, timeout=30).json()
    assert back == {"prompt": text}
    assert httpx.post(server.url + "/detokenize", json={"tokens": [10**6]}, timeout=30).status_code == 400
    assert httpx.post(server.url + "/tokenize", json={}, timeout=30).status_code == 400


@pytest.mark.slow
def test_generation_config_supplies_unset_sampling_fields(server, greedy_model_dir):
    """The model asks for top_k 1: requests that leave top_k unset decode greedily; a request
    that sets it samples."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    greedy = client.completions.create(model="first", prompt="Paris", max_tokens=12, temperature=0,
                                       extra_body={"ignore_eos": True}).choices[0].text
    for seed in range(3):
        assert client.completions.create(model="first", prompt="Paris", max_tokens=12, seed=seed,
                                         extra_body={"ignore_eos": True}).choices[0].text == greedy
    sampled = {client.completions.create(model="first", prompt="Paris", max_tokens=12, seed=seed,
                                         extra_body={"top_k": -1, "ignore_eos": True}).choices[0].text
               for seed in range(3)}
    assert sampled != {greedy}


@pytest.mark.slow
def test_generation_config_none_turns_the_defaults_off(greedy_model_dir):
    srv = ServerProcess("--model", greedy_model_dir, "--num-pages", "256", "--generation-config", "none").wait_ready()
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused")
        texts = {client.completions.create(model=greedy_model_dir, prompt="Paris", max_tokens=12, seed=seed,
                                           extra_body={"ignore_eos": True}).choices[0].text for seed in range(3)}
        assert len(texts) > 1
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("argv", [["--attn", "bogus"], ["--attn", "torch,fa3,fi"], ["--moe-backend", "bogus"]])
def test_a_wrong_backend_name_is_refused_before_torch_is_imported(argv):
    """Its check needs no package: the flag fails at once, not after the workers' imports."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "minisgl", *argv], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and argv[0] in run.stderr, run.stderr[-2000:]
    assert "torch" not in _imported(run.stderr)


@pytest.mark.parametrize("hub, says", [
    ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
    ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "http://127.0.0.1:9 could not be reached"),  # the discard port: refused
])
def test_a_hub_model_that_cannot_be_downloaded_is_one_line_and_exit_2(hub, says, tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), **hub}
    run = subprocess.run([sys.executable, "-m", "minisgl", "--model", "no-such-org/no-such-model"], env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 2, run.stderr[-3000:]
    assert run.stderr.splitlines() == [f"minisgl: error: --model no-such-org/no-such-model: not a local directory, "
                                       f"and not in the Hub cache; {says} to download it (give a local directory, or "
                                       "download the model first where the Hub can be reached)"], run.stderr[-3000:]
