"""Offline batch generation: `LLM(path).generate(prompts, params)`.

It drives the same SchedulerServer as the server's scheduler process, fed from an in-process
inbox instead of ZMQ; with tp > 1 the other ranks run as follower processes, as in the server.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing as mp
from collections.abc import Sequence

from tqdm import tqdm
from transformers import AutoTokenizer

from minisgl.core.params import SamplingParams
from minisgl.distributed import DistributedInfo, destroy
from minisgl.message import AbortMsg, ExitMsg, TokenizedRequestMsg
from minisgl.scheduler import Scheduler, SchedulerConfig, StepOutput
from minisgl.scheduler.process import LocalInbox, SchedulerServer, run_scheduler
from minisgl.tokenizer.incremental import IncrementalDetokenizer
from minisgl.tokenizer.worker import prompt_tail
from minisgl.utils.liveness import WorkerLink
from minisgl.utils.logger import get_logger
from minisgl.utils.net import rendezvous_addr

logger = get_logger(__name__)


class LLM:
    """Keyword arguments are SchedulerConfig / EngineConfig fields, named as the server's flags (e.g.
    `max_seq_len`, `max_prefill_length`, `page_size`, `cuda_graph_max_bs`; LoRA: `lora_modules={name: path}`,
    `max_loras`, `max_lora_rank`) or as Mini-SGLang names
    them (`SchedulerConfig.SEED_NAMES`); `tp` sets the tensor-parallel size. As in Mini-SGLang,
    `dtype` may come second: `LLM(path, torch.bfloat16)`."""

    def __init__(self, model_path: str, dtype=None, tp: int = 1, **kwargs):
        if dtype is not None:
            kwargs["dtype"] = dtype
        config = SchedulerConfig(model_path=model_path, **kwargs)
        self.followers: list[mp.process.BaseProcess] = []
        if tp > 1:
            config = dataclasses.replace(config, tp_info=DistributedInfo(0, tp), distributed_addr=rendezvous_addr())
            ctx = mp.get_context("spawn")
            status = ctx.Queue()
            for rank in range(1, tp):
                rank_config = dataclasses.replace(config, tp_info=DistributedInfo(rank, tp))
                link = WorkerLink(f"scheduler-rank{rank}", status)  # no watch here: no heartbeat
                p = ctx.Process(target=run_scheduler, args=(rank_config, {}, link), daemon=True)
                p.start()
                self.followers.append(p)
        try:
            self.scheduler = Scheduler(config)
        except BaseException:
            destroy()  # the group's peers are about to go: no later LLM here may reuse it
            self._stop_followers(grace=0)  # they may wait for rank 0 in a collective forever
            raise
        self.inbox = LocalInbox()
        self._outputs: list[StepOutput] = []
        self.server = SchedulerServer(self.scheduler, self.inbox, self._outputs.extend)
        self.tokenizer = _load_tokenizer(model_path)
        self._uids = itertools.count()

    def generate(self, prompts: Sequence[str] | Sequence[list[int]] | str,
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True, lora: str | Sequence[str | None] | None = None) -> list[dict]:
        """`lora`: the adapter (a name of `lora_modules`) for every prompt, or one per prompt (None: the
        base model); the same as each SamplingParams' `lora`."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # a single prompt
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params or SamplingParams()] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(sampling_params)} sampling params")
        if lora is not None:
            names = [lora] * len(prompts) if isinstance(lora, str) else list(lora)
            if len(names) != len(prompts):
                raise ValueError(f"{len(prompts)} prompts but {len(names)} lora names")
            sampling_params = [dataclasses.replace(p, lora=n) for p, n in zip(sampling_params, names)]
        requests = []
        for i, (prompt, params) in enumerate(zip(prompts, sampling_params)):
            ids = self._encode(prompt)
            params, problem = self.scheduler.admit(ids, params)  # max_tokens None: the rest of the context
            if problem:  # before any is queued: a refused call leaves nothing behind for the next one
                raise ValueError(f"prompt {i}: {problem}")
            requests.append((ids, params))
        uids = [next(self._uids) for _ in requests]
        # Stop strings are matched on the text as it grows, as the server's detokenizer does: the
        # text ends before the stop string, and the request is aborted in the scheduler at once
        # (its later outputs dropped, its pages freed before this call returns).
        texts = {uid: self._stop_watch(ids, params) for uid, (ids, params) in zip(uids, requests) if params.stop}
        for uid, (ids, params) in zip(uids, requests):
            self.inbox.put(TokenizedRequestMsg(uid, ids, params))
        results = {uid: [] for uid in uids}
        logprobs = {uid: [] if params.logprobs is not None else None for uid, params in zip(uids, sampling_params)}
        prompt_logprobs: dict[int, list | None] = {uid: None for uid in uids}
        finished: dict[int, str] = {}
        with tqdm(total=len(uids), desc="Generating", unit="req", disable=not use_tqdm) as bar:
            while len(finished) < len(uids):
                self.server.run_once()
                outputs, self._outputs[:] = list(self._outputs), []
                for out in outputs:
                    text = texts.get(out.uid)
                    stopped = text is not None and text.stopped
                    if out.prompt_logprobs is not None:
                        prompt_logprobs[out.uid] = [None if lp is None else {"token_id": t, "logprob": lp,
                                                    "top_logprobs": [tuple(p) for p in top]}
                                                    for t, lp, top in out.prompt_logprobs]
                    if out.token_id is not None and not stopped:
                        results[out.uid].append(out.token_id)
                        if out.logprob is not None:
                            logprobs[out.uid].append({"token_id": out.token_id, "logprob": out.logprob,
                                                      "top_logprobs": [tuple(p) for p in out.top_logprobs]})
                        if text is not None:
                            text.add(out.token_id)
                            if text.stopped and not out.finish_reason:
                                self.inbox.put(AbortMsg(out.uid))
                    if out.finish_reason:
                        if out.error:
                            raise ValueError(out.error)
                        finished[out.uid] = "stop" if text is not None and text.stopped else out.finish_reason
                        bar.update(1)
        return [{"text": self._text(results[u], texts.get(u)), "token_ids": results[u],
                 "finish_reason": finished[u], "logprobs": logprobs[u], "prompt_logprobs": prompt_logprobs[u]}
                for u in uids]

    def _stop_watch(self, ids: list[int], params: SamplingParams) -> IncrementalDetokenizer:
        if self.tokenizer is None:
            raise ValueError("stop strings need the model's tokenizer; this model has none (use stop_token_ids)")
        tokenizer = self.tokenizer.backend_tokenizer
        return IncrementalDetokenizer(tokenizer, list(params.stop), True, prompt_tail(self.tokenizer, ids))

    def _text(self, ids: list[int], watch: IncrementalDetokenizer | None) -> str:
        cut = watch.text_before_stop if watch is not None else None
        return self._decode(ids) if cut is None else cut

    def _encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer; pass prompts as token ids")
            return self.tokenizer.encode(prompt)
        return list(prompt)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer else ""

    def shutdown(self) -> None:
        if self.followers:
            self.inbox.put(ExitMsg())
            self.server.run_once()  # broadcasts the exit to the other ranks
        # Rank 0 tears its group down beside the followers, not after them: a teardown that waits
        # on its peers (NCCL, symmetric memory) would otherwise hold every follower until killed.
        self.scheduler.shutdown()
        self._stop_followers(grace=30)

    def _stop_followers(self, grace: float) -> None:
        """Join the follower ranks, killing any still alive after `grace` seconds."""
        for rank, p in enumerate(self.followers, start=1):
            p.join(grace)
            if p.is_alive():
                logger.warning("tensor-parallel rank %d did not exit within %.0f s of shutdown; killed", rank, grace)
                p.kill()
                p.join(10)


def _load_tokenizer(model_path: str):
    try:
        return AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError, TypeError):
        return None  # e.g. benchmark configs without tokenizer files: token-id prompts only
