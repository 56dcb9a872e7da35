"""The benchmark client's own ceiling: how many streamed events per second it takes in.

A canned server (raw asyncio + HTTP/1.1 chunked encoding, no framework, one precomputed event
written per token, yielding to the event loop after each) streams `max_tokens` chunks as fast as it
can; the benchmark client (`minisgl.benchmark.sse_client`) drives it at rate inf. Whatever the
client sustains here is the most it could ever report from a real server on this machine.

    python benchmark/online/client_ceiling.py --client-processes 1,2,4 --server-processes 2
    python benchmark/online/client_ceiling.py --serve 8000 [--no-usage]   # only the canned server

Writes JSON and a PNG (events/s per client-process count).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import sys
import time

import orjson

from minisgl.benchmark.report import bar_plot, device_name, write_json
from minisgl.benchmark.sse_client import BenchRequest, Target, run_requests
from minisgl.utils.net import free_port

_EVENT = b'data: {"id":"cmpl-canned","object":"text_completion","created":0,"model":"canned","choices":' \
         b'[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]}\n\n'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class CannedStream(asyncio.Protocol):
    """One keep-alive connection: each POST is answered with max_tokens canned events (and a usage
    event unless `send_usage` is off, like servers that never report usage)."""

    send_usage = True

    def connection_made(self, transport) -> None:
        self.transport, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1").lower()
        length = next((int(line.split(":")[1]) for line in head.split("\r\n") if line.startswith("content-length:")), 0)
        if len(self.buf) < head_end + 4 + length:
            return
        body, self.buf = self.buf[head_end + 4:head_end + 4 + length], self.buf[head_end + 4 + length:]
        if head.startswith("get"):
            models = orjson.dumps({"object": "list", "data": [{"id": "canned", "object": "model"}]})
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(models), models))
            return
        asyncio.get_running_loop().create_task(self.stream(orjson.loads(body).get("max_tokens", 16)))

    async def stream(self, n: int) -> None:
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        event = _chunk(_EVENT)
        for _ in range(n):
            if self.transport.is_closing():
                return
            self.transport.write(event)
            await asyncio.sleep(0)
        usage = orjson.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}})
        end = _chunk(b"data: " + usage + b"\n\n") if self.send_usage else b""
        self.transport.write(end + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


def serve_canned(port: int, send_usage: bool = True) -> None:
    CannedStream.send_usage = send_usage
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass

    async def main() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # several server processes, one port
        sock.bind(("127.0.0.1", port))
        server = await asyncio.get_running_loop().create_server(CannedStream, sock=sock, backlog=4096)
        await server.serve_forever()

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--client-processes", default="1,2", help="comma-separated client process counts to try")
    p.add_argument("--server-processes", type=int, default=2, help="canned server processes (SO_REUSEPORT)")
    p.add_argument("--num-requests", type=int, default=256)
    p.add_argument("--tokens", type=int, default=256, help="events streamed per request")
    p.add_argument("--out", default="results/client_ceiling.json", help="JSON path; the PNG goes beside it")
    p.add_argument("--serve", type=int, metavar="PORT", help="only run the canned server on PORT (until killed)")
    p.add_argument("--no-usage", action="store_true", help="with --serve: send no usage event")
    args = p.parse_args(argv)
    if args.serve:
        serve_canned(args.serve, send_usage=not args.no_usage)
        return 0
    counts = [int(c) for c in args.client_processes.split(",")]

    port = free_port()
    ctx = mp.get_context("spawn")
    servers = [ctx.Process(target=serve_canned, args=(port,), daemon=True) for _ in range(args.server_processes)]
    for s in servers:
        s.start()
    target = Target(f"http://127.0.0.1:{port}", "canned")
    reqs = [BenchRequest([0], args.tokens) for _ in range(args.num_requests)]
    rows = []
    try:
        _wait_port(port)
        run_requests(target, reqs[:8], processes=1, progress=False)  # warm-up
        for k in counts:
            results, seconds, _ = run_requests(target, reqs, processes=k, desc=f"{k} client process(es)")
            failed = [r.error for r in results if not r.ok]
            if failed:
                raise RuntimeError(f"canned requests failed: {failed[0]}")
            events = sum(r.chunks for r in results)
            rows.append({"client_processes": k, "events": events, "seconds": seconds, "events_per_s": events / seconds})
            print(f"{k} client process(es): {events} events in {seconds:.2f} s = {events / seconds:,.0f} events/s",
                  flush=True)
    finally:
        for s in servers:
            s.kill()
    result = {"benchmark": "client_ceiling", "device": device_name(), "cores": os.cpu_count(),
              "server_processes": args.server_processes, "num_requests": args.num_requests, "tokens": args.tokens,
              "results": rows}
    write_json(args.out, result)
    png = os.path.splitext(args.out)[0] + ".png"
    bar_plot(png, f"benchmark client ceiling ({os.cpu_count()} cores, canned server)",
             [f"{r['client_processes']} proc" for r in rows], [r["events_per_s"] for r in rows], "events / s")
    print(f"wrote {args.out} and {png}")
    return 0


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError("canned server did not start")


if __name__ == "__main__":
    sys.exit(main())
