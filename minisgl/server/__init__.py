"""The serving side: CLI flags, process launcher, OpenAI-compatible HTTP API, shell."""
