"""LoRA adapters over the OpenAI API: `--lora-modules name=path` serves each adapter under its name
(a request's `model` selects it, and the response names it), /v1/models lists each with the base
model as its `parent`, an unknown name is a 404 naming it, /metrics counts each adapter's requests,
and an adapter the engine cannot serve stops the server at start with the reason. With
--allow-runtime-lora-updating, adapters load and unload while requests run (vLLM's routes): one in
use is never unloaded, a running request's output is what it is on an idle server, requests stream
while an adapter is read, and its load route returns once it is served (until then it is an
unknown model, and can be neither unloaded nor loaded again)."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from minisgl.server.args import parse_args
from tests.lora.peft_adapters import GatedAdapter, peft_greedy
from tests.server.serving import ServerProcess

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

PROMPT = [5, 17, 42, 99, 3, 250, 251]


@pytest.fixture(scope="module")
def server(lora_model_dir, lora_adapters):
    srv = ServerProcess("--model", lora_model_dir, "--served-model-name", "base", "--dtype", "float32", "--page-size", "4",
                        "--num-pages", "256", "--lora-modules", f"r4={lora_adapters['r4']}", f"r16={lora_adapters['r16']}"
                        ).wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused")


def test_the_model_field_selects_the_adapter_and_the_response_names_it(client, lora_model_dir, lora_adapters):
    tokenizer = AutoTokenizer.from_pretrained(lora_model_dir)
    for model, adapter in (("r4", lora_adapters["r4"]), ("r16", lora_adapters["r16"]), ("base", None)):
        reply = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0,
                                          extra_body={"ignore_eos": True, "skip_special_tokens": False})
        assert reply.model == model
        assert reply.choices[0].text == tokenizer.decode(peft_greedy(lora_model_dir, adapter, PROMPT, 8)), model
    chat = client.chat.completions.create(model="r16", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert chat.model == "r16"


def test_models_lists_each_adapter_with_its_parent(client, lora_adapters):
    cards = {m.id: m.model_dump() for m in client.models.list().data}
    assert list(cards) == ["base", "r4", "r16"]
    assert cards["r4"]["parent"] == cards["r16"]["parent"] == "base" and cards["base"]["parent"] is None
    assert cards["r4"]["root"] == lora_adapters["r4"]


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
    (["--allow-runtime-lora-updating"], "--allow-runtime-lora-updating needs adapter slots: --max-loras N"),
    (["--lora-modules", "a=/x", "b=/y", "--max-loras", "1"], "--max-loras 1 is fewer slots than the 2 adapters"),
])
def test_bad_lora_flags_are_refused(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_an_adapter_above_max_lora_rank_stops_the_server_with_the_reason(lora_model_dir, lora_adapters):
    run = subprocess.run([sys.executable, "-m", "minisgl", "--model", lora_model_dir, "--num-pages", "64",
                          "--lora-modules", f"r16={lora_adapters['r16']}", "--max-lora-rank", "8"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "LoRA adapter 'r16'" in run.stderr and "rank 16 exceeds max_lora_rank 8 (--max-lora-rank)" in run.stderr


@pytest.fixture(scope="module")
def runtime_server(lora_model_dir, lora_adapters):
    srv = ServerProcess("--model", lora_model_dir, "--served-model-name", "base", "--dtype", "float32", "--page-size", "4",
                        "--num-pages", "512", "--lora-modules", f"r4={lora_adapters['r4']}", "--max-loras", "2",
                        "--allow-runtime-lora-updating").wait_ready()
    yield srv
    assert srv.stop() == 0


def test_runtime_routes_exist_only_when_allowed(server):
    r = httpx.post(server.url + "/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": "/x"}, timeout=10)
    assert r.status_code == 404


def test_adapters_load_and_unload_under_load_without_touching_running_requests(runtime_server, lora_model_dir, lora_adapters):
    url = runtime_server.url
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    long = {"model": "r4", "prompt": PROMPT, "max_tokens": 300, "temperature": 0, "extra_body": {"ignore_eos": True}}

    def post(path: str, **body) -> httpx.Response:
        return httpx.post(url + path, json=body, timeout=60)

    def done(future) -> bool:
        wait([future], timeout=0.1)
        return future.done()

    # The scheduler runs in short slices (stopped between them) until the stream's first token has
    # come and the unload is answered, so the stream is certainly still running when the unload
    # reaches it, however long this machine keeps the test from reading the stream.
    def open_stream():
        stream = client.completions.create(stream=True, **long)
        return stream, next(iter(stream)).choices[0].text

    with ThreadPoolExecutor(1) as background, runtime_server.stopped("scheduler"):
        opening = background.submit(open_stream)
        runtime_server.run_until("scheduler", lambda: done(opening))
        unloading = background.submit(post, "/v1/unload_lora_adapter", lora_name="r4")
        runtime_server.run_until("scheduler", lambda: done(unloading))
    (stream, text), r = opening.result(), unloading.result()
    # r4 is in use by the stream: refused, and the stream goes on untouched.
    assert r.status_code == 400 and "LoRA adapter 'r4' is in use by 1 request(s)" in r.json()["error"]["message"]
    r = post("/v1/load_lora_adapter", lora_name="r8", lora_path=lora_adapters["r8"])
    assert r.status_code == 200 and r.text == "Success: LoRA adapter 'r8' added successfully."
    reply = client.completions.create(model="r8", prompt=PROMPT, max_tokens=8, temperature=0,
                                      extra_body={"ignore_eos": True, "skip_special_tokens": False})
    tokenizer = AutoTokenizer.from_pretrained(lora_model_dir)
    assert reply.choices[0].text == tokenizer.decode(peft_greedy(lora_model_dir, lora_adapters["r8"], PROMPT, 8))
    assert [m.id for m in client.models.list().data] == ["base", "r4", "r8"]
    r = post("/v1/load_lora_adapter", lora_name="r16", lora_path=lora_adapters["r16"])
    assert r.status_code == 400 and "all 2 slots are taken (--max-loras)" in r.json()["error"]["message"]
    text += "".join(chunk.choices[0].text for chunk in stream)
    assert text == client.completions.create(**long).choices[0].text, "the load changed a running request"

    r = post("/v1/unload_lora_adapter", lora_name="r4")
    assert r.status_code == 200 and r.text == "Success: LoRA adapter 'r4' removed successfully."
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="r4", prompt=PROMPT, max_tokens=2)
    assert post("/v1/unload_lora_adapter", lora_name="r4").status_code == 404


def test_requests_stream_while_an_adapter_loads_and_its_route_returns_once_it_is_served(runtime_server, lora_model_dir,
                                                                                       lora_adapters, tmp_path):
    url = runtime_server.url
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    gated = GatedAdapter(lora_adapters["r8"], str(tmp_path / "slow"))  # its config is read when the test says
    base = {"model": "base", "prompt": PROMPT, "max_tokens": 16, "temperature": 0, "extra_body": {"ignore_eos": True}}

    def post(path: str, **body) -> httpx.Response:
        return httpx.post(url + path, json=body, timeout=600)

    with ThreadPoolExecutor(1) as background:
        try:
            loading = background.submit(post, "/v1/load_lora_adapter", lora_name="slow", lora_path=gated.path)
            while not gated.reader_blocked():
                time.sleep(0.05)
            # The load is blocked reading the adapter: a stream runs to its end meanwhile.
            chunks = list(client.completions.create(stream=True, **base))
            assert chunks[-1].choices[0].finish_reason == "length"
            streamed = "".join(c.choices[0].text for c in chunks)
            with pytest.raises(openai.NotFoundError, match="the model 'slow' does not exist"):
                client.completions.create(model="slow", prompt=PROMPT, max_tokens=2)
            r = post("/v1/unload_lora_adapter", lora_name="slow")
            assert r.status_code == 400 and "'slow' is still loading" in r.json()["error"]["message"]
            r = post("/v1/load_lora_adapter", lora_name="slow", lora_path=lora_adapters["r8"])
            assert r.status_code == 400 and "'slow' is already being loaded" in r.json()["error"]["message"]
            assert not loading.done()
            gated.release()
            r = loading.result()
        finally:
            gated.close()
    assert r.status_code == 200 and r.text == "Success: LoRA adapter 'slow' added successfully."
    reply = client.completions.create(model="slow", prompt=PROMPT, max_tokens=8, temperature=0,
                                      extra_body={"ignore_eos": True, "skip_special_tokens": False})
    tokenizer = AutoTokenizer.from_pretrained(lora_model_dir)
    assert reply.choices[0].text == tokenizer.decode(peft_greedy(lora_model_dir, lora_adapters["r8"], PROMPT, 8))
    assert streamed == client.completions.create(**base).choices[0].text
    assert post("/v1/unload_lora_adapter", lora_name="slow").status_code == 200


def test_a_runtime_load_the_engine_cannot_serve_is_refused_with_the_reason(runtime_server, tiny_model_dir, tmp_path):
    from tests.lora.peft_adapters import build_adapter

    big = build_adapter(tiny_model_dir("Qwen3ForCausalLM"), str(tmp_path / "big"), 32, 32)
    r = httpx.post(runtime_server.url + "/v1/load_lora_adapter", json={"lora_name": "big", "lora_path": big},
                   timeout=60)
    assert r.status_code == 400 and "rank 32 exceeds max_lora_rank 16" in r.json()["error"]["message"]
    r = httpx.post(runtime_server.url + "/v1/load_lora_adapter", json={"lora_name": "base", "lora_path": big},
                   timeout=60)
    assert r.status_code == 400 and "already been loaded" in r.json()["error"]["message"]


def test_an_unloaded_adapters_metrics_go_with_it_and_names_are_bounded(runtime_server, lora_adapters):
    """/metrics cannot grow with load/unload cycles: an adapter's lora_name series leave with it,
    and a name is at most 128 characters (a model id and a label value)."""
    url = runtime_server.url

    def labelled(name: str) -> bool:
        return f'lora_name="{name}"' in httpx.get(url + "/metrics", timeout=10).text

    for cycle in range(3):
        name = f"cycle{cycle}"
        assert httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": lora_adapters["r8"]},
                          timeout=120).status_code == 200
        done = httpx.post(url + "/v1/completions", json={"model": name, "prompt": PROMPT, "max_tokens": 2}, timeout=60)
        assert done.status_code == 200 and labelled(name)
        assert httpx.post(url + "/v1/unload_lora_adapter", json={"lora_name": name}, timeout=60).status_code == 200
        assert not labelled(name)
    long = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "n" * 129, "lora_path": lora_adapters["r8"]},
                      timeout=60)
    assert long.status_code == 400 and long.json()["error"]["param"] == "lora_name"


def test_a_backtracking_rank_pattern_is_refused_while_requests_flow(runtime_server, lora_adapters, tmp_path):
    """An adapter whose rank_pattern backtracks is refused (400 naming the pattern) within the
    pattern budget, and requests on the base model are answered promptly all the while: the
    pattern is never matched holding the GIL without bound."""
    import json
    import shutil
    import threading

    path = str(tmp_path / "redos")
    shutil.copytree(lora_adapters["r4"], path)
    with open(f"{path}/adapter_config.json") as f:
        config = json.load(f)
    with open(f"{path}/adapter_config.json", "w") as f:
        json.dump({**config, "rank_pattern": {r"((\w|\.)+)+X": 8, r"(?:.*?){20}\d{20}": 8}}, f)
    url, out = runtime_server.url, []
    load = threading.Thread(target=lambda: out.append(httpx.post(
        url + "/v1/load_lora_adapter", json={"lora_name": "redos", "lora_path": path}, timeout=300)))
    start = time.monotonic()
    load.start()
    slowest = 0.0
    while load.is_alive():
        t0 = time.monotonic()
        done = httpx.post(url + "/v1/completions", json={"model": "base", "prompt": PROMPT, "max_tokens": 2}, timeout=60)
        assert done.status_code == 200
        slowest = max(slowest, time.monotonic() - t0)
    load.join()
    assert out[0].status_code == 400 and "did not finish matching" in out[0].json()["error"]["message"], out[0].text
    assert time.monotonic() - start < 60
    assert slowest < 5, f"a request on the base model took {slowest:.1f} s during the load"


def test_a_request_racing_its_adapters_unload_gets_404_like_any_unknown_model(lora_model_dir, lora_adapters):
    """The unload reaches the scheduler first, the request (which passed the API's check while the
    adapter was still listed) right after it: a 404 model_not_found, as for a name never loaded.
    The scheduler stands still while both are queued, in this order, behind one tokenizer."""
    import threading

    srv = ServerProcess("--model", lora_model_dir, "--served-model-name", "base", "--dtype", "float32", "--page-size",
                        "4", "--num-pages", "256", "--lora-modules", f"r4={lora_adapters['r4']}", "--max-loras", "2",
                        "--allow-runtime-lora-updating", "--tokenizer-workers", "1",
                        env={"MINISGL_LOG_LEVEL": "debug"}).wait_ready()
    try:
        out: dict[str, httpx.Response] = {}

        def call(key: str, path: str, body: dict) -> threading.Thread:
            t = threading.Thread(target=lambda: out.__setitem__(key, httpx.post(srv.url + path, json=body, timeout=120)))
            t.start()
            return t

        with srv.stopped("scheduler"):
            unload = call("unload", "/v1/unload_lora_adapter", {"lora_name": "r4"})
            time.sleep(1.0)  # the unload is on its way through the tokenizer first
            before = srv.sent_to_scheduler()
            request = call("request", "/v1/completions", {"model": "r4", "prompt": PROMPT, "max_tokens": 2})
            deadline = time.monotonic() + 60
            while srv.sent_to_scheduler() == before:
                assert time.monotonic() < deadline, "the request never reached the scheduler's queue"
                time.sleep(0.05)
        unload.join(120)
        request.join(120)
        assert out["unload"].status_code == 200, out["unload"].text
        resp = out["request"]
        assert resp.status_code == 404, resp.text
        assert resp.json()["error"]["code"] == "model_not_found" and resp.json()["error"]["param"] == "model"
    finally:
        assert srv.stop() == 0
