"""The online benchmark's parts: arrivals, traces, latency statistics, tables and a plot. The
client that sends the requests is `minisgl.benchmark.sse_client`; `benchmark/online/bench.py`
wires them.

Each request streams (`stream=True`, `stream_options.include_usage`, `ignore_eos`), so that:
TTFT = send -> first chunk with text; ITL = gaps between consecutive text chunks (a chunk may carry
more than one token when the detokenizer holds back a partial character); TPOT = (E2E - TTFT) /
(output tokens - 1); E2E = send -> end of stream.
"""

from __future__ import annotations

import json
import random

import numpy as np

from .repeats import repeat_summary
from .sse_client import BenchRequest, RequestResult

PERCENTILES = (50, 90, 99)
# ---------------------------------------------------------------------------------------- workload

def split_server_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """A benchmark's command line: its own flags, and the server's after `--`."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


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
        "expected_output_tokens": sum(r.max_tokens or 0 for r in results),
        # Requests that came back with fewer tokens than asked (a server that ignored max_tokens
        # or ignore_eos): their throughput is not comparable.
        "short_outputs": sum(1 for r in ok if r.max_tokens is not None and r.output_tokens < r.max_tokens),
        "tokens_from": "/".join(sorted({r.tokens_from for r in ok})) or None,
        "chunks": sum(r.chunks for r in ok),
        "ttft_ms": percentiles([r.ttft for r in ok]),
        "itl_ms": percentiles([g for r in ok for g in r.itl]),
        "tpot_ms": percentiles(tpot),
        "e2e_ms": percentiles([r.latency for r in ok]),
    }


def by_rate(rows: list[dict]) -> dict[str, list[dict]]:
    """A sweep's rows (each repeat of each rate) grouped by their `rate` label, in the sweep's order."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["rate"], []).append(r)
    return groups


def throughput_summary(rows: list[dict]) -> list[dict]:
    """Each rate's output throughput over its repeats (repeat_summary: every value, mean, min, max,
    spread), so a difference can be read against the run-to-run noise of the same burst."""
    out = []
    for rate, group in by_rate(rows).items():
        values = [r["output_throughput"] for r in group if r["output_throughput"] is not None]
        if values:
            out.append({"rate": rate, **repeat_summary(values)})
    return out


def format_summary(stats: list[dict]) -> str:
    lines = ["| rate (req/s) | runs | out tok/s mean | min | max | spread (max-min)/mean |", "|---|---|---|---|---|---|"]
    lines += [f"| {s['rate']} | {s['runs']} | {fmt(s['mean'])} | {fmt(s['min'])} | {fmt(s['max'])} | "
              f"{fmt(None if s['spread'] is None else 100 * s['spread'], 2)}% |" for s in stats]
    return "\n".join(lines)


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


def comparison_table(rows: list[dict], compare: list[dict], names: tuple[str, str]) -> str:
    """Two servers driven with the same requests, side by side per rate: output throughput and TTFT
    percentiles as means over the rate's repeats, and the ratios A/B of those means."""
    a, b = names
    head = ["rate (req/s)", f"{a} out tok/s", f"{b} out tok/s", "ratio", f"{a} TTFT p50/p90/p99",
            f"{b} TTFT p50/p90/p99", "TTFT p99 ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    theirs = by_rate(compare)
    for rate, group in by_rate(rows).items():
        x, y = _means(group), _means(theirs.get(rate, []))
        ttft = lambda m: "/".join(fmt(m[f"ttft_p{p}"]) for p in PERCENTILES)  # noqa: E731
        cells = [rate, fmt(x["output_throughput"]), fmt(y["output_throughput"]),
                 fmt(_ratio(x["output_throughput"], y["output_throughput"]), 2), ttft(x), ttft(y),
                 fmt(_ratio(x["ttft_p99"], y["ttft_p99"]), 2)]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _means(group: list[dict]) -> dict[str, float | None]:
    """Output throughput and TTFT percentiles, each the mean over a rate's repeats (None if none has it)."""
    columns = {"output_throughput": [r["output_throughput"] for r in group]}
    columns.update({f"ttft_p{p}": [r["ttft_ms"][f"p{p}"] for r in group] for p in PERCENTILES})
    return {k: _mean([v for v in vs if v is not None]) for k, vs in columns.items()}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x is not None and y else None


def latency_plot(path: str, title: str, rows: list[dict], compare: list[dict] | None = None,
                 names: tuple[str, str] = ("", "")) -> None:
    """Four panels over the rates: TTFT, ITL and E2E percentiles (ms, log scale) and throughput.
    Lines join the means over each rate's repeats and every repeat is a dot beside them; with
    `compare`, the second server's p50 and p99 (grey) and throughput too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    sparse = FuncFormatter(lambda v, _: f"{v:g}" if f"{v:e}"[0] in "25" else "")  # minor ticks: 2x and 5x only
    ours, theirs = by_rate(rows), by_rate(compare or [])
    labels = list(ours)
    x = list(range(len(labels)))

    def series(ax, groups, value, style, label, color=None):
        """The mean over each rate's repeats as a line, each repeat as a dot at the rate."""
        per_rate = [[v for v in map(value, groups.get(rate, [])) if v is not None] for rate in labels]
        line = ax.plot(x, [_mean(vs) or float("nan") for vs in per_rate], style, label=label, color=color)[0]
        dots = [(i, v) for i, vs in enumerate(per_rate) for v in vs]
        if dots and max(len(vs) for vs in per_rate) > 1:
            ax.scatter(*zip(*dots), s=12, color=line.get_color(), alpha=0.5)

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, key, name in zip(axes.flat, ("ttft_ms", "itl_ms", "e2e_ms"), ("TTFT", "ITL", "end-to-end latency")):
        for p, style in zip(PERCENTILES, ("o-", "s--", "^:")):
            series(ax, ours, lambda r: r[key][f"p{p}"], style, f"{names[0]} p{p}".strip())
        for p, style in zip((50, 99), ("o-", "^:")) if compare else ():
            series(ax, theirs, lambda r: r[key][f"p{p}"], style, f"{names[1]} p{p}", color="grey")
        ax.set_title(name)
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        lo, hi = ax.get_ylim()
        ax.yaxis.set_minor_formatter(plain if hi / lo < 10 else sparse)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax = axes.flat[3]
    series(ax, ours, lambda r: r["output_throughput"], "o-", f"{names[0]} output tok/s".strip(), color="#55A868")
    if compare:
        series(ax, theirs, lambda r: r["output_throughput"], "o-", f"{names[1]} output tok/s", color="grey")
    ax.set_ylabel("output tokens / s")
    ax.set_title("throughput" + (f" (dots: each of {max(map(len, ours.values()))} repeats)"
                                 if max(map(len, ours.values())) > 1 else ""))
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    series(ax2, ours, lambda r: r["request_throughput"], "s--", "requests/s", color="#C44E52")
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
