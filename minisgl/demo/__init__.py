"""The built-in demo model that `python -m minisgl` serves with no `--model`: its recipe and where it
is (model.py, which imports neither torch nor transformers: a demo server's launcher reads it), the
synthetic chats it learns (corpus.py) and its training on the CPU at the first start (training.py)."""
