"""Multi-node serving: two separate `python -m minisgl` launches play two nodes on loopback (TCP
rendezvous, --tp 2 split 1 + 1; gloo on the CPU, and NCCL with one GPU per node on a machine with
two), and the API on node 0 gives TP=1's greedy tokens. Node 1 runs only its engine rank: no HTTP
server, and it exits once node 0 is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import openai
import pytest
import torch

from minisgl.server.args import parse_args
from minisgl.server.runtime.nodes import NodePlacement
from minisgl.utils.net import free_port
from tests.distributed.test_tensor_parallel import PROMPTS, single_rank_texts
from tests.helpers import refused_flags
from tests.server.serving import ServerProcess

COMMON = ("--tp", "2", "--nnodes", "2", "--dtype", "float32", "--page-size", "4", "--num-pages", "512")
# Each "node" its own device: gloo on the CPU; on a 2-GPU machine one GPU each, NCCL between them
# as between two hosts (CUDA_VISIBLE_DEVICES hides the other node's GPU).
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")),
]


class WorkerNode:
    """Node 1: `python -m minisgl --node-rank 1 ...` in its own session, killed with its
    children whatever happens to the test."""

    def __init__(self, *args: str, env: dict | None = None):
        self.log_path = tempfile.NamedTemporaryFile(prefix="minisgl-node1-", suffix=".log", delete=False).name
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "minisgl", "--device", "cpu", *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def output(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        try:  # the launcher and any worker it left behind: the test must leave no process
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_two_nodes_on_loopback_match_tp1(tiny_model_dir, device):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    rendezvous = f"127.0.0.1:{free_port()}"
    flags = ("--model", model_dir, *COMMON, "--dist-init-addr", rendezvous, "--device", device)
    gpu = (lambda i: {"CUDA_VISIBLE_DEVICES": str(i)}) if device == "cuda" else (lambda i: None)
    # Node 1 first: its rank waits for node 0's rendezvous to open, as a worker pod does.
    worker = WorkerNode(*flags, "--node-rank", "1", env=gpu(1))
    head = ServerProcess(*flags, "--node-rank", "0", "--served-model-name", "m", env=gpu(0))
    try:
        head.wait_ready(240)
        client = openai.OpenAI(base_url=head.url + "/v1", api_key="x")
        resp = client.completions.create(model="m", prompt=PROMPTS, max_tokens=16, temperature=0,
                                         extra_body={"ignore_eos": True})
        served = [c.text for c in sorted(resp.choices, key=lambda c: c.index)]
        assert "node 1 ready" in worker.output()
        assert "Uvicorn running" not in worker.output() and "started worker detokenizer" not in worker.output()
        assert head.stop() == 0
        # Node 0 is gone: node 1's rank fails its next collective and the node exits on its own.
        assert worker.wait(60) != 0, worker.output()
    finally:
        head.stop()
        worker.kill()
    assert served == single_rank_texts(model_dir, device)


def test_the_ranks_split_evenly_and_in_order_over_the_nodes():
    layout = [list(NodePlacement(8, 2, rank).local_ranks) for rank in range(2)]
    assert layout == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert NodePlacement(8, 2, 1, "leader:29500").rendezvous() == "tcp://leader:29500"
    assert NodePlacement(2).rendezvous().startswith("file://")


@pytest.mark.parametrize("argv, problem", [
    (["--tp", "3", "--nnodes", "2", "--dist-init-addr", "h:1"], "--tp 3 must be a multiple of --nnodes 2"),
    (["--tp", "2", "--nnodes", "2"], "--nnodes > 1 needs --dist-init-addr"),
    (["--tp", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"], "--node-rank must be in 0..1"),
    (["--tp", "2", "--nnodes", "2", "--dist-init-addr", "nohost"], "give HOST:PORT"),
    (["--dist-init-addr", "h:1"], "--dist-init-addr needs --nnodes > 1"),
])
def test_bad_node_flags_are_refused_in_one_line(argv, problem, capsys):
    err = refused_flags(argv, capsys)
    assert problem in err and err.count("\n") == 1


def test_ranks_over_several_nodes_never_use_the_single_node_custom_all_reduce():
    from minisgl.server.runtime.workers import scheduler_config

    one_node = parse_args(["--tp", "2"])
    two_nodes = parse_args(["--tp", "2", "--nnodes", "2", "--dist-init-addr", "h:1"])
    assert not scheduler_config(one_node, "m").disable_custom_all_reduce
    assert scheduler_config(two_nodes, "m").disable_custom_all_reduce
