"""The offline Python interface."""

from .llm import LLM

__all__ = ["LLM"]
