"""The serving side, one folder per job: `args` (every CLI flag, read by the operator too: standard
library only), `runtime/` (worker processes, supervision, the pipeline's client), `http/` (the
OpenAI-compatible API), `parsers/` (reading tool calls and reasoning out of a chat's text),
`shell` (the terminal chat), and `launch`, the entry points that tie them together. Imports go
downward: launch -> http -> runtime and parsers -> args."""
