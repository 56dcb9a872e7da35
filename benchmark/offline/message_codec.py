"""The host time of one decode step's message: the scheduler encodes a TokenBatchMsg of one StepOutput
per running request (on the thread that launches the GPU's work), the detokenizer decodes it. On the
CPU, no model.

    python benchmark/offline/message_codec.py --batches 1,64,207,512
    python benchmark/offline/message_codec.py --baseline /tmp/base   # against another tree's codec

On the serving benchmark (1,024 chats on Qwen3-0.6B, an H200) the mean decode batch is 207 and a run
sends about 1,300 of them (benchmark/NOTES.md). With --baseline, that tree's minisgl/message/base.py is
loaded beside this one's and the two are timed in turns, call by call: a VM's speed swings by 2x
from one minute to the next, so two separate runs do not compare. p10, p50 and p90 microseconds over
5,000 calls each. Writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time

from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.message import StepOutput, TokenBatchMsg, base

REPEATS = 5000


def step_message(batch: int) -> TokenBatchMsg:
    """A decode step's message as the scheduler sends it: every request's new token and counts."""
    return TokenBatchMsg([StepOutput(uid, 1000 + uid, None, prompt_tokens=500 + uid, cached_tokens=64)
                          for uid in range(batch)])


def load_codec(tree: str):
    """Another tree's codec module, with this tree's message classes registered in it in the same order."""
    spec = importlib.util.spec_from_file_location("baseline_codec", os.path.join(tree, "minisgl/message/base.py"))
    codec = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(codec)
    for cls in base._CLASSES:
        codec.message(cls)
    return codec


def quantiles_us(times: list[float]) -> dict[str, float]:
    deciles = statistics.quantiles(times, n=10)
    return {"p10": deciles[0] * 1e6, "p50": deciles[4] * 1e6, "p90": deciles[8] * 1e6}


def time_codecs(codecs: dict, msg: TokenBatchMsg) -> dict[str, dict]:
    """Each codec's encode of `msg` and decode of its bytes, the codecs in turns call by call."""
    data = base.encode(msg)
    for codec in codecs.values():
        assert codec.encode(msg) == data and codec.decode(data) == msg
    times: dict[str, list[float]] = {f"{name} {op}": [] for name in codecs for op in ("encode", "decode")}
    for _ in range(REPEATS):
        for name, codec in codecs.items():
            start = time.perf_counter()
            codec.encode(msg)
            times[f"{name} encode"].append(time.perf_counter() - start)
            start = time.perf_counter()
            codec.decode(data)
            times[f"{name} decode"].append(time.perf_counter() - start)
    return {key: quantiles_us(values) for key, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,64,207,512", help="comma-separated StepOutputs per message")
    parser.add_argument("--baseline", help="another checkout whose codec is timed beside this one's")
    parser.add_argument("--out", default="results/message_codec.json")
    args = parser.parse_args()
    codecs = {"this tree": base, **({"baseline": load_codec(args.baseline)} if args.baseline else {})}
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        msg = step_message(batch)
        timings = time_codecs(codecs, msg)
        rows.append({"batch": batch, "bytes": len(base.encode(msg)), "us": timings})
        print(f"batch {batch:4d}: " + ", ".join(f"{key} p50 {t['p50']:.1f} us" for key, t in timings.items()),
              flush=True)
    write_json(args.out, {"device": device_name(), "repeats": REPEATS, "baseline": args.baseline, "rows": rows})
    labels = [f"{key.split()[0] if key.startswith('baseline') else 'this'} {r['batch']}" for r in rows
              for key in r["us"] if key.endswith("encode")]
    values = [t["p50"] for r in rows for key, t in r["us"].items() if key.endswith("encode")]
    bar_plot(args.out.removesuffix(".json") + ".png", "TokenBatchMsg encode (the scheduler's side), p50", labels,
             values, "µs per message", fmt="%.0f")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
