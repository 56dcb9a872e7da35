"""The chaos scenarios at full size against a real server (CI runs them small:
tests/benchmark/test_chaos.py): load with cancels, a soak with every process's RSS sampled,
slowloris, an 8 GB request, and the hostile mixed load on a second server (capped
connections, an API key): 100 idle sockets beyond the cap, a 7 MB /tokenize, a 450-deep schema and
an unauthenticated /health_generate flood at once, /health probed with a 1 s timeout throughout.

    python benchmark/online/chaos.py --requests 20000 --streams 512 --out results/chaos
    python benchmark/online/chaos.py --model Qwen/Qwen3-0.6B --device cuda --requests 50000

Starts the server itself (the built-in demo model on the CPU unless --model). Writes chaos.json
and chaos.png (RSS of each process against requests served) to --out, with progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: its tests/chaos.py

from minisgl.benchmark.report import write_json  # noqa: E402
from minisgl.benchmark.server_process import ServerProcess  # noqa: E402
from minisgl.utils.net import free_port  # noqa: E402
from tests import chaos  # noqa: E402


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def plot_rss(path: str, samples: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name in samples[0]["rss"]:
        ax.plot([s["done"] for s in samples], [s["rss"][name] / 2**20 for s in samples], label=name)
    ax.set_xlabel("requests served")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("soak: resident memory per process")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def hostile_mixed_load(a: argparse.Namespace, flags: list[str]) -> dict:
    """The hostile mixed load against a server of its own (capped connections, an API key)."""
    port = free_port()
    hostile_flags = [*flags[2:], "--port", str(port), "--max-connections", str(a.hostile_cap)]
    log_path = os.path.join(tempfile.mkdtemp(prefix="minisgl-chaos-"), "server.log")
    server = ServerProcess(hostile_flags, f"http://127.0.0.1:{port}", log_path,
                           env={"MINISGL_API_KEY": "chaos"}).wait_ready(600)
    result: dict = {}
    try:
        log(f"hostile mixed load: {a.hostile_cap + 100} idle sockets (cap {a.hostile_cap}), a 7 MB /tokenize, "
            f"a 450-deep schema, 30 /health_generate loops, {a.hostile_seconds:.0f} s")
        result = chaos.hostile_mixed_load(server.url, "chaos", a.hostile_seconds, idle_sockets=a.hostile_cap + 100,
                                          tokenize_bytes=7 << 20, schema_depth=450, flood=30, probe_timeout=1.0)
        log(f"  /health: {result['health_probes']} probes, {result['health_not_200']} not 200, slowest "
            f"{result['slowest_health_s']:.2f} s; chats {result['chats']}")
    finally:
        result["server_exit"] = server.stop()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="served model (default: the built-in demo)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--requests", type=int, default=5000, help="soak: unique requests")
    p.add_argument("--streams", type=int, default=512, help="load with cancels: streams (half cut midway)")
    p.add_argument("--slow-connections", type=int, default=200)
    p.add_argument("--hostile-seconds", type=float, default=60, help="the hostile mixed load: how long")
    p.add_argument("--hostile-cap", type=int, default=40, help="the hostile mixed load: --max-connections")
    p.add_argument("--out", default="results/chaos")
    p.add_argument("--server-arg", action="append", default=[], help="one more server flag (repeatable)")
    a = p.parse_args()

    port = free_port()
    flags = ["--port", str(port), "--device", a.device, "--header-timeout", "5", *a.server_arg]
    if a.model:
        flags += ["--model", a.model]
    log_path = os.path.join(tempfile.mkdtemp(prefix="minisgl-chaos-"), "server.log")
    server = ServerProcess(flags, f"http://127.0.0.1:{port}", log_path).wait_ready(600)
    results: dict = {"server_flags": flags}
    try:
        pids = chaos.worker_pids(server.proc.pid, server.output())
        log(f"load with cancels: {a.streams} streams")
        results["load_with_cancels"] = chaos.load_with_cancels(server.url, a.streams)
        results["kv_pages_used_after"] = chaos.kv_pages_used(server.url)
        log(f"  {results['load_with_cancels']}")
        log(f"slowloris: {a.slow_connections} connections")
        results["slowloris"] = chaos.slowloris(server.url, a.slow_connections, seconds=20)
        log(f"  cut {results['slowloris']['cut']}, slowest /health {results['slowloris']['slowest_health_s']:.2f} s")
        log("the issue's request (16 prompts x n=16, four 2,000,000-char stop strings)")
        results["issue_21_request"] = chaos.issue_21_request(server.url, pids)
        results["largest_allowed_fan_out"] = chaos.issue_21_request(server.url, pids, stop_chars=1024)
        log(f"soak: {a.requests} unique requests")
        soak = chaos.soak(server.url, pids, a.requests, samples=50, progress=log)
        results["soak"] = soak
        results["soak_growth_bytes_per_request"] = {n: chaos.growth_per_request(soak["samples"], n) for n in pids}
        log(f"  growth per request (B): {results['soak_growth_bytes_per_request']}")
    finally:
        results["server_exit"] = server.stop()
    results["hostile_mixed_load"] = hostile_mixed_load(a, flags)
    os.makedirs(a.out, exist_ok=True)
    write_json(os.path.join(a.out, "chaos.json"), results)
    if "soak" in results:
        plot_rss(os.path.join(a.out, "chaos.png"), results["soak"]["samples"])
    log(f"wrote {a.out}/chaos.json and chaos.png")


if __name__ == "__main__":
    main()
