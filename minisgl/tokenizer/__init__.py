"""The tokenizer and detokenizer worker processes (`worker`) and what they do: render chat
templates, refuse an over-long prompt before tokenizing it (`prompt_bound`), route a request and
its abort to the same tokenizer worker (`routing`), and detokenize incrementally with stop
strings (`incremental`, `detokenizer`, `stop_strings`)."""
