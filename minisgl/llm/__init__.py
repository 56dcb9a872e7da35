"""The offline Python interface: `from minisgl.llm import LLM, SamplingParams` (vLLM's pair)."""

from minisgl.core.params import SamplingParams

from .llm import LLM

__all__ = ["LLM", "SamplingParams"]
