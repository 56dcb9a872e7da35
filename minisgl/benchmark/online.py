"""The online benchmark's parts: arrivals, a streaming request driver on the `openai` client,
latency statistics, a server launcher, a table and a plot. `benchmark/online/bench.py` wires them.

Each request streams (`stream=True`, `stream_options.include_usage`, `ignore_eos`), so that:
TTFT = send -> first chunk with text; ITL = gaps between consecutive text chunks (a chunk may carry
more than one token when the detokenizer holds back a partial character); TPOT = (E2E - TTFT) /
(output tokens - 1); E2E = send -> end of stream. Token counts come from the final usage chunk.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import numpy as np

PERCENTILES = (50, 90, 99)
# Words for chat prompts: about one token each in common tokenizers, so input lengths stay close.
_WORDS = ("the of and to in is it that for on with as was at by be this from or have not are but what all "
          "were when we there can an your which their said if will each about how up out them then she many "
          "some so these would other into has more her two like him see time could no make than first been").split()


@dataclass
class BenchRequest:
    prompt_ids: list[int]
    max_tokens: int
    arrival_s: float = 0.0  # offset from the start of the run


@dataclass
class RequestResult:
    ok: bool
    prompt_len: int
    max_tokens: int
    start: float = 0.0
    end: float = 0.0
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    chunks: int = 0
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.end - self.start


# ---------------------------------------------------------------------------------------- workload

def parse_rates(text: str) -> list[float]:
    rates = []
    for part in text.split(","):
        part = part.strip().lower()
        rate = float("inf") if part in ("inf", "infinity", "max") else float(part)
        if not rate > 0:
            raise ValueError(f"request rate must be > 0 or inf, got {part!r}")
        rates.append(rate)
    return rates


def rate_label(rate: float) -> str:
    return "inf" if rate == float("inf") else f"{rate:g}"


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """Arrival offsets of a Poisson process of `rate` requests/s (exponential gaps, first at 0);
    all zeros for an infinite rate (everything sent at once)."""
    if rate == float("inf"):
        return [0.0] * n
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def random_ids(rng: random.Random, length: int, vocab_size: int) -> list[int]:
    """Random token ids below min(vocab, 10001), like the offline workload's."""
    high = min(vocab_size, 10001)
    return [rng.randrange(high) for _ in range(length)]


def load_trace(path: str, num_requests: int, max_input_len: int, max_output_len: int, vocab_size: int,
               seed: int = 0, speedup: float = 1.0) -> tuple[list[BenchRequest], int]:
    """Requests from a JSONL trace, one object per line: arrival as `arrival_s` (seconds) or
    `timestamp` (milliseconds, as in Mooncake traces), lengths as `input_len`/`input_length` and
    `output_len`/`output_length`. Arrivals are made relative to the first and divided by `speedup`;
    the first `num_requests` are kept and lengths are clipped to the limits. Returns (requests,
    number of clipped requests)."""
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            try:
                arrival = float(obj["arrival_s"]) if "arrival_s" in obj else float(obj["timestamp"]) / 1000.0
                inp = int(obj.get("input_len", obj.get("input_length")))
                out = int(obj.get("output_len", obj.get("output_length")))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: need arrival_s|timestamp, input_len, output_len ({e})") from e
            rows.append((arrival, max(1, inp), max(1, out)))
    if not rows:
        raise ValueError(f"{path}: empty trace")
    rows.sort(key=lambda r: r[0])
    rows = rows[:num_requests]
    t0 = rows[0][0]
    rng = random.Random(seed)
    clipped = sum(1 for _, i, o in rows if i > max_input_len or o > max_output_len)
    reqs = [BenchRequest(random_ids(rng, min(i, max_input_len), vocab_size), min(o, max_output_len), (a - t0) / speedup)
            for a, i, o in rows]
    return reqs, clipped


def chat_text(ids: list[int]) -> str:
    """A user message of about len(ids) tokens, derived from the ids (for --api chat)."""
    return " ".join(_WORDS[i % len(_WORDS)] for i in ids)


# ------------------------------------------------------------------------------------------ driver

async def send_request(client, model: str, req: BenchRequest, api: str = "completions",
                       temperature: float | None = None, timeout: float = 600.0) -> RequestResult:
    """One streaming request; never raises (a failure is a result with ok=False)."""
    res = RequestResult(ok=False, prompt_len=len(req.prompt_ids), max_tokens=req.max_tokens)
    common = dict(model=model, stream=True, stream_options={"include_usage": True}, temperature=temperature,
                  extra_body={"ignore_eos": True}, timeout=timeout)

    async def stream() -> None:
        if api == "chat":
            it = await client.chat.completions.create(
                messages=[{"role": "user", "content": chat_text(req.prompt_ids)}],
                max_completion_tokens=req.max_tokens, **common)
        else:
            it = await client.completions.create(prompt=req.prompt_ids, max_tokens=req.max_tokens, **common)
        last = None
        async for chunk in it:
            now = time.perf_counter()
            if chunk.choices:
                c = chunk.choices[0]
                text = c.delta.content if api == "chat" else c.text
                if text:
                    if last is None:
                        res.ttft = now - res.start
                    else:
                        res.itl.append(now - last)
                    last = now
                    res.chunks += 1
            if chunk.usage is not None:
                res.prompt_tokens = chunk.usage.prompt_tokens
                res.output_tokens = chunk.usage.completion_tokens

    res.start = time.perf_counter()
    try:
        await asyncio.wait_for(stream(), timeout)
        res.ok = True
    except Exception as e:  # noqa: BLE001 - any failure is counted, the run goes on
        res.error = f"{type(e).__name__}: {str(e)[:200] or 'no message'}"
    res.end = time.perf_counter()
    if res.ok and res.ttft is None:  # no text at all: the first token came with the end
        res.ttft = res.latency
    return res


async def run_requests(client, model: str, reqs: list[BenchRequest], api: str = "completions",
                       temperature: float | None = None, timeout: float = 600.0, max_concurrency: int | None = None,
                       desc: str = "", progress: bool = True) -> tuple[list[RequestResult], float, int]:
    """Send each request at its arrival offset; returns (results, wall seconds from the first
    send to the last completion, peak requests in flight)."""
    from tqdm.auto import tqdm

    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    bar = tqdm(total=len(reqs), desc=desc, unit="req", disable=not progress, dynamic_ncols=True)
    in_flight = peak = 0
    start = time.perf_counter()

    async def one(req: BenchRequest) -> RequestResult:
        nonlocal in_flight, peak
        delay = start + req.arrival_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if sem:
            await sem.acquire()
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            res = await send_request(client, model, req, api, temperature, timeout)
        finally:
            in_flight -= 1
            if sem:
                sem.release()
        bar.update(1)
        if not res.ok:
            bar.set_postfix_str(f"failed: {res.error[:60]}")
        return res

    try:
        results = await asyncio.gather(*(one(r) for r in reqs))
    finally:
        bar.close()
    end = max((r.end for r in results), default=start)
    return list(results), end - start, peak


# -------------------------------------------------------------------------------------- statistics

def percentiles(values_s: list[float]) -> dict:
    """mean, p50, p90, p99 and max in milliseconds (None when there are no values)."""
    keys = ["mean", *(f"p{p}" for p in PERCENTILES), "max"]
    if not values_s:
        return dict.fromkeys(keys)
    a = np.asarray(values_s, dtype=float) * 1000.0
    out = {"mean": float(a.mean())}
    out.update({f"p{p}": float(np.percentile(a, p)) for p in PERCENTILES})
    out["max"] = float(a.max())
    return out


def summarize(results: list[RequestResult], duration_s: float) -> dict:
    ok = [r for r in results if r.ok]
    errors: dict[str, int] = {}
    for r in results:
        if not r.ok:
            errors[r.error] = errors.get(r.error, 0) + 1
    out_tokens = sum(r.output_tokens for r in ok)
    tpot = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {
        "requests": len(results), "completed": len(ok), "failed": len(results) - len(ok),
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
        "duration_s": duration_s,
        "request_throughput": len(ok) / duration_s if duration_s > 0 else None,
        "output_throughput": out_tokens / duration_s if duration_s > 0 else None,
        "input_tokens": sum(r.prompt_tokens for r in ok),
        "output_tokens": out_tokens,
        "expected_output_tokens": sum(r.max_tokens for r in results),
        "chunks": sum(r.chunks for r in ok),
        "ttft_ms": percentiles([r.ttft for r in ok]),
        "itl_ms": percentiles([g for r in ok for g in r.itl]),
        "tpot_ms": percentiles(tpot),
        "e2e_ms": percentiles([r.latency for r in ok]),
    }


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_table(rows: list[dict]) -> str:
    """A markdown table, one row per rate: throughput and p50/p90/p99 of TTFT, ITL and E2E (ms)."""
    head = ["rate (req/s)", "done/sent", "req/s", "out tok/s", "TTFT p50/p90/p99", "ITL p50/p90/p99",
            "E2E p50/p90/p99"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        pct = lambda k: "/".join(fmt(r[k][f"p{p}"]) for p in PERCENTILES)  # noqa: E731
        cells = [r["rate"], f"{r['completed']}/{r['requests']}", fmt(r["request_throughput"], 2),
                 fmt(r["output_throughput"]), pct("ttft_ms"), pct("itl_ms"), pct("e2e_ms")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def latency_plot(path: str, title: str, rows: list[dict]) -> None:
    """Four panels over the rates: TTFT, ITL and E2E percentiles (ms, log scale) and throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    sparse = FuncFormatter(lambda v, _: f"{v:g}" if f"{v:e}"[0] in "25" else "")  # minor ticks: 2x and 5x only
    labels = [r["rate"] for r in rows]
    x = list(range(len(rows)))
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, key, name in zip(axes.flat, ("ttft_ms", "itl_ms", "e2e_ms"), ("TTFT", "ITL", "end-to-end latency")):
        for p, style in zip(PERCENTILES, ("o-", "s--", "^:")):
            ys = [r[key][f"p{p}"] for r in rows]
            ax.plot(x, [float("nan") if y is None else y for y in ys], style, label=f"p{p}")
        ax.set_title(name)
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        lo, hi = ax.get_ylim()
        ax.yaxis.set_minor_formatter(plain if hi / lo < 10 else sparse)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax = axes.flat[3]
    ax.plot(x, [r["output_throughput"] or 0 for r in rows], "o-", color="#55A868", label="output tok/s")
    ax.set_ylabel("output tokens / s")
    ax.set_title("throughput")
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(x, [r["request_throughput"] or 0 for r in rows], "s--", color="#C44E52", label="requests/s")
    ax2.set_ylabel("requests / s")
    ax.legend(loc="upper left")
    ax2.legend(loc="lower right")
    for ax in axes.flat:
        ax.set_xticks(x, labels)
        ax.set_xlabel("offered request rate (req/s)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
