"""Command-line flags of the server: the one place where each flag, its default and its help live.

Everything else (the launcher, the Dockerfile test, the Kubernetes operator) reads these values
from here instead of repeating them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from typing import Any

from minisgl.utils import env
from minisgl.utils.choices import (
    ADMISSION_MODES,
    ATTN_BACKEND_NAMES,
    DEVICES,
    DTYPE_ALIASES,
    DTYPES,
    KV_CACHE_DTYPES,
    METRICS_COMPAT,
    MOE_BACKENDS,
    ONLINE_QUANTIZATION,
    PREFIX_CACHES,
    REASONING_PARSERS,
    SCHEDULING_POLICIES,
    SPECULATIVE_DRAFTERS,
    TOOL_PARSERS,
)
from minisgl.utils.lora_modules import parse_lora_modules

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 1919
API_KEY_ENV = env.API_KEY.name

# Probe paths, shared with the Dockerfile HEALTHCHECK and the operator's pod probes.
LIVENESS_PATH = "/health"
READINESS_PATH = "/ready"
METRICS_PATH = "/metrics"


def canonical_dtype(name: str) -> str:
    """--dtype's argparse type: the aliases vLLM users know, as the torch name."""
    return DTYPE_ALIASES.get(name, name)


def _flag(help: str, default: Any = None, **argparse_kwargs: Any) -> Any:
    return field(default=default, metadata={"help": help, **argparse_kwargs})


@dataclass(frozen=True)
class ServerArgs:
    model: str | None = _flag(
        "HF model id or local directory. Without it a small built-in demo model is served on the CPU, "
        "trained at its first start (about a minute) to answer briefly, write JSON and call tools."
    )
    tp: int = _flag("Tensor-parallel size: one engine process per rank.", 1, aliases=["--tensor-parallel-size"])
    nnodes: int = _flag("Nodes the tensor-parallel ranks span (multi-node serving): each runs --tp / --nnodes ranks.", 1)
    node_rank: int = _flag(
        "This node's index, 0 to --nnodes - 1. Node 0 runs the API, tokenizers, detokenizer and scheduler with "
        "ranks 0..k-1; every other node runs only its engine ranks (no HTTP).", 0)
    dist_init_addr: str | None = _flag(
        "HOST:PORT where node 0 hosts the torch.distributed rendezvous (TCP), reachable from every node; "
        "needed with --nnodes > 1.")
    host: str = _flag("Address to listen on (use 0.0.0.0 inside a container).", DEFAULT_HOST)
    port: int = _flag("Port to listen on.", DEFAULT_PORT)
    dtype: str = _flag("Weight and activation dtype: auto, bfloat16, float16 (half) or float32 (float).", "auto",
                       type=canonical_dtype)
    device: str = _flag("Device to run on: auto (CUDA when present, else CPU), cuda or cpu.", "auto")
    page_size: int = _flag("Tokens per KV-cache page.", 16)
    kv_cache_dtype: str = _flag(
        "KV-cache element type: auto (the model's dtype) or FP8 (fp8_e4m3, fp8_e5m2), one byte per element: "
        "twice the pages in the same memory. Scaled per layer by the checkpoint's k_scale/v_scale, else 1.0.",
        "auto", choices=list(KV_CACHE_DTYPES))
    quantization: str | None = _flag(
        "Quantize a checkpoint's weights at load: fp8 (per output channel, activations per token; FP8 GEMMs "
        "on Hopper, FP8-rounded weights elsewhere). FP8 checkpoints (quant_method fp8 or compressed-tensors) "
        "need no flag.", choices=list(ONLINE_QUANTIZATION))
    max_running_requests: int = _flag("Most requests decoding at once.", 256)
    max_prefill_length: int = _flag(
        "Most prompt tokens computed in one step; longer prompts are split (chunked prefill).", 8192
    )
    prefill_delay_steps: int = _flag(
        "While fewer than a sixteenth of --max-running-requests' slots are free and at least that many requests "
        "wait, they gather for one prefill until that many slots are free, waiting at most this many decode steps "
        "(a prefill step's host cost hardly depends on its size; no effect below 32 slots); 0 prefills each freed "
        "slot at once.", 8)
    max_seq_len: int | None = _flag("Cap on prompt + output tokens (default: the model's; not above it).",
                                    aliases=["--max-model-len"])
    cache: str = _flag("Prefix cache: radix (share prompt prefixes) or naive.", "radix", choices=list(PREFIX_CACHES))
    admission: str = _flag(
        "When a request starts running: dynamic admits it once its prompt and --decode-reserve-tokens fit in the KV "
        "cache and gives it pages as it grows, preempting the latest, lowest-priority request (recomputed later from "
        "its cached prefix, its output unchanged) when the cache runs out; reserve admits it only once its prompt "
        "plus its whole max_tokens fit, so nothing is ever preempted but a request without max_tokens holds the "
        "rest of the context.", "dynamic", choices=list(ADMISSION_MODES))
    decode_reserve_tokens: int = _flag(
        "With --admission dynamic: output tokens whose KV pages a request has reserved at admission (at most its "
        "max_tokens); past them it takes pages as it decodes.", 256)
    skip_server_warmup: bool = _flag(
        "On a GPU the server serves a short synthetic burst before /ready turns 200, so the first real burst "
        "finds its kernels compiled and memory pools grown; this skips it (faster start, slower first burst).",
        False)
    scheduling_policy: str = _flag(
        "Which waiting request runs first, and which running one is preempted first: fcfs (arrival order; a "
        "request's priority must be 0) or priority (the request's priority field, lower first, then arrival).",
        "fcfs", choices=list(SCHEDULING_POLICIES))
    speculative: str | None = _flag(
        "Speculative decoding: ngram (prompt lookup: drafts copied from where the request's last tokens appeared "
        "before in its prompt or output; no extra weights) or eagle3 (an EAGLE-3 draft head, --draft-model). Each "
        "decode step then verifies up to --speculative-num-tokens drafted tokens per request in one forward pass; "
        "outputs are unchanged (docs/serving.md: when it pays).", choices=list(SPECULATIVE_DRAFTERS))
    draft_model: str | None = _flag(
        "With --speculative eagle3: the EAGLE-3 head, a local directory or HF id in the published format "
        "(config.json of LlamaForCausalLMEagle3, fc/midlayer/norm/lm_head/d2t weights) trained for --model.")
    speculative_num_tokens: int = _flag("With --speculative: most tokens a request drafts per step (k).", 4)
    speculative_ngram_min: int = _flag("With --speculative ngram: shortest suffix n-gram looked up.", 1)
    speculative_ngram_max: int = _flag("With --speculative ngram: longest suffix n-gram looked up (the longest "
                                       "match wins).", 4)
    speculative_max_batch: int = _flag(
        "With --speculative: above this many running requests nobody drafts (a large batch is compute-bound, "
        "and verifying k + 1 tokens a request costs nearly k + 1 times a decode step).", 16)
    speculative_min_acceptance: float = _flag(
        "With --speculative: a request whose drafts' acceptance (a drafted token's chance of being kept, a moving "
        "average) falls below this stops drafting for a while (twice as long each time in a row), then tries "
        "again.", 0.3)
    attn: str = _flag("Attention backend(s): 'auto', a name, or 'prefill,decode' (an unknown name lists them).",
                      "auto")
    moe_backend: str = _flag(
        "How MoE models run their experts: auto (on GPUs fused Triton kernels for small batches, a grouped GEMM "
        "for large ones; the per-expert loop on the CPU), fused, grouped (bfloat16 on GPUs) or loop.", "auto",
        choices=list(MOE_BACKENDS))
    cuda_graph_max_bs: int | None = _flag(
        "Largest decode batch captured in a CUDA graph (0 turns CUDA graphs off, the prefill's piecewise ones too).")
    piecewise_cuda_graph_max_tokens: int = _flag(
        "Prefill batches up to this many tokens (at most --max-prefill-length; e.g. 8192) replay piecewise CUDA "
        "graphs: the model between its attention calls, captured per token count, with eager attention in "
        "between. Faster short prefills (time to first token), but every decode step after their capture ran "
        "slower at small batch (benchmark/NOTES.md); 0 (the default): every prefill eager.", 0)
    disable_custom_all_reduce: bool = _flag(
        "With --tp on GPUs: NCCL for every all-reduce, instead of the NVLink one-/two-shot all-reduce "
        "(PyTorch symmetric memory) for small messages and its fusion with the add + RMSNorm after it.", False)
    memory_ratio: float = _flag("Fraction of device memory for weights, graphs and KV cache.", 0.9,
                                aliases=["--gpu-memory-utilization"])
    num_pages: int | None = _flag("Fix the number of KV pages instead of sizing from memory.")
    dummy_weight: bool = _flag("Random weights instead of loading a checkpoint (benchmarks).", False)
    served_model_name: tuple[str, ...] | None = _flag(
        "Model name(s) the API answers to; the first is reported (default: --model).", nargs="+")
    lora_modules: tuple[str, ...] | None = _flag(
        "LoRA adapters served beside the base model, as name=path (a PEFT adapter directory: adapter_config.json "
        "and adapter_model.safetensors); a request selects one by its model field, /v1/models lists them.",
        nargs="+")
    max_loras: int | None = _flag("LoRA adapter slots, allocated at start (default: one per --lora-modules name).")
    max_lora_rank: int = _flag("Highest LoRA rank the adapter slots hold; an adapter above it is refused at load.", 16)
    allow_runtime_lora_updating: bool = _flag(
        "Serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's), loading adapters into free slots "
        "of --max-loras while serving.", False)
    api_key: str | None = _flag(
        f"Require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize. Prefer ${API_KEY_ENV} or "
        "--api-key-file: a flag's value is visible to every user of the machine in `ps`.")
    api_key_file: str | None = _flag("A file holding the API key (its first line): the preferred way to pass it.")
    shell: bool = _flag("Open an interactive chat in the terminal instead of serving HTTP.", False)
    shell_temperature: float = _flag("Sampling temperature of the --shell's answers (0: greedy).", 0.7)
    shell_max_tokens: int = _flag("Most tokens of one --shell answer.", 512)
    drain_timeout: float = _flag(
        "After SIGTERM: at most this many seconds for in-flight requests to finish; then those left are aborted "
        "(503, or an error event and [DONE] on a stream) and the server exits. A second signal exits at once.", 30.0)
    watchdog_timeout: float = _flag(
        "Seconds any worker (a tokenizer, the detokenizer, the scheduler or a tensor-parallel rank) may stop "
        "turning (stopped, deadlocked, one step that long: a hung GPU or collective) before /health fails, so "
        "the orchestrator restarts the server.", 300.0)
    max_request_bytes: int = _flag("Largest request body accepted, in bytes (413 beyond).", 8 << 20)
    max_buffered_request_bytes: int = _flag(
        "Request bodies held in memory at once, all connections together, in bytes: a body that would go "
        "beyond it gets 503 with Retry-After (with the per-body limit alone, every connection could hold one).",
        256 << 20)
    max_header_bytes: int = _flag(
        "Largest request head (request line and headers), in bytes; a connection sending more gets 431 and is "
        "closed, before any header (the API key included) is looked at.", 64 << 10)
    header_timeout: float = _flag(
        "Seconds a connection may take to send a complete request head (after connecting, or after its previous "
        "response); slower ones are closed (slowloris).", 10.0)
    body_timeout: float = _flag("Seconds a request may take to send its whole body; slower ones get 408.", 30.0)
    max_connections: int = _flag(
        "API requests in progress at once (one per HTTP connection): one beyond it gets 503 JSON with "
        "Retry-After. Requests without the API key, the probes and /metrics never count and are always answered. "
        "Sockets left idle never lock clients out: beyond this many open, the longest idle are closed (the "
        "open-file limit is raised to the system's hard limit at start, and this is capped below it).", 2048)
    sse_keepalive: float = _flag(
        "Seconds a stream may stay silent (a long step, a queue) before the server sends an SSE comment line "
        "(': keep-alive'), so proxies with idle timeouts keep it open.", 15.0)
    max_tokenize_bytes: int = _flag(
        "Largest text /tokenize takes, in UTF-8 bytes (a prompt, or a chat's message contents together); 400 "
        "beyond. Tokenizing runs beside the event loop, one request at a time.", 1 << 20)
    max_detokenize_tokens: int = _flag("Most token ids one /detokenize request takes; 400 beyond.", 1 << 18)
    health_generate_interval: float = _flag(
        "/health_generate (open without the API key) generates at most once per this many seconds: callers "
        "meanwhile share the last answer, and its request never counts toward --max-pending-requests.", 1.0)
    max_prompt_tokens: int | None = _flag("Most prompt tokens per request (default: the context length).")
    max_new_tokens: int | None = _flag("Largest max_tokens a request may ask for (default: the context length).")
    max_n: int = _flag("Largest n (choices per request) and number of prompts per completion request.", 16)
    max_pending_requests: int = _flag(
        "Requests in the server at once, running or queued; beyond it new ones get 429 with Retry-After.", 1024)
    chat_template: str | None = _flag("A Jinja chat template replacing the model's: a file path or the template itself.")
    tool_call_parser: str | None = _flag(
        "How the model writes tool calls, for tool_choice auto: hermes (also Qwen2.5/Qwen3), llama3_json, "
        "qwen3_coder (<function=...> XML) or mistral ([TOOL_CALLS]). "
        "Default: the one the model's chat template writes (else its architecture's), logged at start; a model "
        "whose template renders no tools refuses tool_choice auto.",
        choices=list(TOOL_PARSERS))
    reasoning_parser: str | None = _flag(
        "Split the model's <think>...</think> into reasoning_content: qwen3 or deepseek_r1.",
        choices=list(REASONING_PARSERS))
    allow_unknown_fields: bool = _flag(
        "Ignore request fields this server does not know (default: refuse them with 400 unsupported_parameter). "
        "Fields it knows but does not implement are refused either way.", False)
    allowed_origins: str | None = _flag(
        "Origins allowed to call the API from a browser (CORS): comma-separated, or a JSON list; '*' for any.")
    generation_config: str = _flag(
        "Sampling defaults for requests that leave them unset: 'auto' (the model's generation_config.json: "
        "temperature, top_p, top_k, min_p, repetition_penalty), 'none', or a directory holding such a file.", "auto")
    tokenizer_workers: int | None = _flag(
        "Tokenizer processes (chat template + encoding run in parallel for many arriving requests); "
        "default: one per 8 CPU cores, 1 to 4.")
    metrics_compat: str | None = _flag(
        "Also export /metrics under another server's names: vllm (vllm:num_requests_running, ...), so dashboards, "
        "autoscalers and gateways written for vLLM work unchanged.", choices=list(METRICS_COMPAT))
    log_level: str = _flag("Logging level.", "info", choices=["critical", "error", "warning", "info", "debug", "trace"])
    grammar_compile_timeout: float = _flag(
        "Seconds one structured-output constraint (a JSON schema, regex, grammar or forced tool call) may take to "
        "compile; beyond it the compile is killed and the request gets 400 naming this flag. Compiles run in "
        "separate processes, so a slow one never delays other requests.", 10.0)
    grammar_compile_workers: int = _flag(
        "Grammar compiles running at once, one process each (a few hundred MB of host memory), started at the "
        "first constrained request; more wait for a free one.", 2)
    max_grammar_depth: int = _flag(
        "How deeply a JSON schema's objects and arrays may nest (compile time grows steeply with it); 400 beyond.",
        64)
    grammar_cache_bytes: int = _flag(
        "Memory for compiled grammars kept for reuse, in bytes (the least recently used go first); also "
        "the most one compiled grammar may hold (a larger one is refused). Each bounded string (maxLength) "
        "compiles to megabytes of token masks (benchmark/NOTES.md): room for the many real schemas have.",
        512 << 20)

    @property
    def model_names(self) -> tuple[str, ...]:
        names = self.served_model_name
        if isinstance(names, str):
            names = (names,)
        return tuple(names) if names else (self.model or "minisgl-demo",)

    @property
    def num_tokenizers(self) -> int:
        return self.tokenizer_workers or max(1, min(4, (os.cpu_count() or 1) // 8))

    @property
    def lora_adapters(self) -> dict[str, str]:
        """--lora-modules as name -> path."""
        return parse_lora_modules(self.lora_modules)

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    def origins(self) -> list[str]:
        if not self.allowed_origins:
            return []
        value = self.allowed_origins.strip()
        return list(json.loads(value)) if value.startswith("[") else [o.strip() for o in value.split(",") if o.strip()]


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # a bad flag: one line, not the whole usage
        fail(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="minisgl",
        description="minisgl: an OpenAI-compatible LLM inference server.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"minisgl {_version()}")
    for f in fields(ServerArgs):
        _add_flag(parser, f, f.default)
    return parser


def add_flags(parser: argparse.ArgumentParser, names: Iterable[str], **defaults: Any) -> None:
    """The named server flags on another parser (a benchmark's), with the server's help, type,
    choices and aliases, so each is defined once; `defaults` replace the server's default there."""
    by_name = {f.name: f for f in fields(ServerArgs)}
    for name in names:
        _add_flag(parser, by_name[name], defaults.get(name, by_name[name].default))


def _add_flag(parser: argparse.ArgumentParser, f: Field, default: Any) -> None:
    meta = dict(f.metadata)
    flags = ["--" + f.name.replace("_", "-"), *meta.pop("aliases", [])]  # aliases: the names vLLM users know
    help_text = meta.pop("help")
    if f.type in ("bool", bool):
        parser.add_argument(*flags, dest=f.name, action="store_true", help=help_text)
        return
    kind = meta.pop("type", None) or {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
    parser.add_argument(*flags, dest=f.name, type=kind, default=default, help=help_text, **meta)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("minisgl")
    except PackageNotFoundError:
        return "unknown (not installed)"


def parse_args(argv: list[str] | None = None) -> ServerArgs:
    parser = build_parser()
    ns = parser.parse_args(argv)
    values = vars(ns)
    if values["api_key_file"] is not None:
        if values["api_key"] is not None:
            fail("give the API key once: --api-key or --api-key-file")
        values["api_key"] = read_api_key_file(values["api_key_file"])
    if values["api_key"] is None:
        values["api_key"] = env.API_KEY.get() or None
    if values["served_model_name"] is not None:
        values["served_model_name"] = tuple(values["served_model_name"])
    if values["lora_modules"] is not None:
        values["lora_modules"] = tuple(values["lora_modules"])
    args = ServerArgs(**values)
    problem = validate(args)
    if problem:
        fail(problem)
    return args


def fail(problem: str) -> None:
    """A flag problem: one line on stderr and exit status 2 (argparse's), before anything starts."""
    print(f"minisgl: error: {problem}", file=sys.stderr)
    sys.exit(2)


def validate(args: ServerArgs) -> str | None:
    if args.tp < 1:
        return "--tp must be >= 1"
    if args.attn != "auto":
        parts = [p.strip() for p in args.attn.split(",")]
        if len(parts) > 2 or any(p not in ATTN_BACKEND_NAMES for p in parts):
            return (f"--attn {args.attn!r}: give auto, one backend or 'prefill,decode' of "
                    f"{', '.join(sorted(ATTN_BACKEND_NAMES))}")
    problem = _check_nodes(args)
    if problem:
        return problem
    if not 0 < args.port < 65536:
        return "--port must be in 1..65535"
    if args.page_size < 1:
        return "--page-size must be >= 1"
    if args.max_running_requests < 1:
        return "--max-running-requests must be >= 1"
    if args.max_prefill_length < 1:
        return "--max-prefill-length must be >= 1"
    if args.prefill_delay_steps < 0:
        return "--prefill-delay-steps must be >= 0"
    if args.piecewise_cuda_graph_max_tokens < 0:
        return "--piecewise-cuda-graph-max-tokens must be >= 0"
    if not 0 < args.memory_ratio <= 1:
        return "--memory-ratio must be in (0, 1]"
    if args.header_timeout <= 0 or args.body_timeout <= 0:
        return "--header-timeout and --body-timeout must be > 0"
    if args.sse_keepalive <= 0 or args.health_generate_interval < 0:
        return "--sse-keepalive must be > 0 and --health-generate-interval >= 0"
    for name in ("tokenizer_workers", "max_request_bytes", "max_buffered_request_bytes", "max_header_bytes",
                 "max_tokenize_bytes", "max_detokenize_tokens", "max_connections", "max_n", "max_pending_requests",
                 "max_prompt_tokens", "max_new_tokens", "decode_reserve_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1"
    problem = _check_speculative(args)
    if problem:
        return problem
    if args.grammar_compile_timeout <= 0:
        return "--grammar-compile-timeout must be > 0"
    for name in ("grammar_compile_workers", "max_grammar_depth", "grammar_cache_bytes"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1"
    if args.dtype not in DTYPES:
        return f"--dtype must be one of {', '.join(DTYPES)}"
    if args.device not in DEVICES:
        return f"--device must be one of {', '.join(DEVICES)}"
    if args.chat_template is not None and "{" not in args.chat_template and not os.path.isfile(args.chat_template):
        return f"--chat-template: no such file: {args.chat_template}"
    if not 0 <= args.shell_temperature <= 2:
        return "--shell-temperature must be in [0, 2]"
    if args.shell_max_tokens < 1:
        return "--shell-max-tokens must be >= 1"
    if args.drain_timeout < 0 or args.watchdog_timeout <= 0:
        return "--drain-timeout must be >= 0 and --watchdog-timeout > 0"
    if args.max_seq_len is not None and args.max_seq_len < 1:
        return "--max-seq-len must be >= 1"
    if args.served_model_name is not None and not all(args.model_names):
        return "--served-model-name: names must not be empty"
    try:
        clash = sorted(set(args.lora_adapters) & set(args.model_names))
    except ValueError as e:
        return str(e)
    if clash:
        return f"--lora-modules: {clash[0]!r} is already the base model's name"
    if args.max_loras is not None and args.max_loras < 1:
        return "--max-loras must be >= 1"
    if args.max_loras is not None and len(args.lora_adapters) > args.max_loras:
        return f"--max-loras {args.max_loras} is fewer slots than the {len(args.lora_adapters)} adapters of --lora-modules"
    if args.max_lora_rank < 1:
        return "--max-lora-rank must be >= 1"
    if args.allow_runtime_lora_updating and not (args.max_loras or args.lora_modules):
        return "--allow-runtime-lora-updating needs adapter slots: --max-loras N (or --lora-modules)"
    try:
        args.origins()
    except (ValueError, TypeError) as e:
        return f"--allowed-origins: not a JSON list: {e}"
    if args.generation_config not in ("auto", "none") and not os.path.isdir(args.generation_config):
        return f"--generation-config must be auto, none or a directory; no directory {args.generation_config}"
    return None


def _check_speculative(args: ServerArgs) -> str | None:
    for name in ("speculative_num_tokens", "speculative_ngram_min", "speculative_ngram_max", "speculative_max_batch"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1"
    if args.speculative_ngram_min > args.speculative_ngram_max:
        return "--speculative-ngram-min must be <= --speculative-ngram-max"
    if not 0 <= args.speculative_min_acceptance <= 1:
        return "--speculative-min-acceptance must be in [0, 1]"
    if args.speculative == "eagle3" and not args.draft_model:
        return "--speculative eagle3 needs --draft-model PATH (an EAGLE-3 head trained for --model)"
    if args.draft_model is not None and args.speculative != "eagle3":
        return "--draft-model is the head of --speculative eagle3; without it nothing reads it"
    return None


def _check_nodes(args: ServerArgs) -> str | None:
    if args.nnodes < 1:
        return "--nnodes must be >= 1"
    if not 0 <= args.node_rank < args.nnodes:
        return f"--node-rank must be in 0..{args.nnodes - 1} (--nnodes {args.nnodes})"
    if args.tp % args.nnodes:
        return f"--tp {args.tp} must be a multiple of --nnodes {args.nnodes} (each node runs the same number of ranks)"
    if args.nnodes == 1:
        if args.dist_init_addr is not None:
            return "--dist-init-addr needs --nnodes > 1 (one node uses a local rendezvous)"
        return None
    if args.dist_init_addr is None:
        return "--nnodes > 1 needs --dist-init-addr HOST:PORT (node 0's rendezvous)"
    host, _, port = args.dist_init_addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"--dist-init-addr {args.dist_init_addr!r}: give HOST:PORT, e.g. leader.svc:29500"
    if args.shell and args.node_rank:
        return "--shell runs on node 0 only (the other nodes serve nothing themselves)"
    return None


def read_api_key_file(path: str) -> str:
    """The key in --api-key-file: its first line, without surrounding white space."""
    try:
        with open(path, encoding="utf-8") as f:
            key = f.readline().strip()
    except OSError as e:
        fail(f"--api-key-file: {e.strerror}: {path}")
    if not key:
        fail(f"--api-key-file: {path} is empty")
    return key


def load_chat_template(value: str | None) -> str | None:
    """--chat-template as a template: a file's contents, or the value itself when it is no file
    (a template has braces, a path usually not)."""
    if value is None:
        return None
    if "{" not in value:
        with open(value, encoding="utf-8") as f:
            return f.read()
    return value


def defaults() -> dict[str, Any]:
    """Default value of every flag, keyed by field name."""
    return {f.name: f.default for f in fields(ServerArgs) if f.default is not MISSING}


__all__ = ["ServerArgs", "build_parser", "parse_args", "defaults", "asdict"]
