"""Offline batch generation: `LLM(path).generate(prompts, params)`."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from tqdm import tqdm
from transformers import AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig


class LLM:
    """Runs a Scheduler in this process. Keyword arguments are SchedulerConfig / EngineConfig
    fields (e.g. `max_seq_len_override`, `max_extend_tokens`, `page_size`, `cuda_graph_max_bs`)."""

    def __init__(self, model_path: str, **kwargs):
        self.scheduler = Scheduler(SchedulerConfig(model_path=model_path, **kwargs))
        self.tokenizer = _load_tokenizer(model_path)
        self._uids = itertools.count()

    def generate(self, prompts: Sequence[str] | Sequence[list[int]] | str,
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[dict]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # a single prompt
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params or SamplingParams()] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(sampling_params)} sampling params")
        uids = []
        for prompt, params in zip(prompts, sampling_params):
            ids = self._encode(prompt)
            problem = self.scheduler.check(len(ids), params)
            if problem:
                raise ValueError(f"prompt {len(uids)}: {problem}")
            uids.append(next(self._uids))
            self.scheduler.add_request(uids[-1], ids, params)
        results = {uid: [] for uid in uids}
        finished: dict[int, str] = {}
        with tqdm(total=len(uids), desc="Generating", unit="req", disable=not use_tqdm) as bar:
            while len(finished) < len(uids):
                for out in self.scheduler.step():
                    if out.token_id is not None:
                        results[out.uid].append(out.token_id)
                    if out.finish_reason:
                        if out.error:
                            raise RuntimeError(out.error)
                        finished[out.uid] = out.finish_reason
                        bar.update(1)
        return [{"text": self._decode(results[u]), "token_ids": results[u], "finish_reason": finished[u]}
                for u in uids]

    def _encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer; pass prompts as token ids")
            return self.tokenizer.encode(prompt)
        return list(prompt)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer else ""

    def shutdown(self) -> None:
        self.scheduler.shutdown()


def _load_tokenizer(model_path: str):
    try:
        return AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError, TypeError):
        return None  # e.g. benchmark configs without tokenizer files: token-id prompts only
