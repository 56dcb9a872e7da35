"""minisgl: a compact LLM inference server. Each folder's `__init__` says what it is for; the
folders import each other downward only, with no cycle (tests/test_import_graph.py)."""
