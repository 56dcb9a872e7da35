"""Make a config-only model dir (e.g. ../shared/models/qwen3-0.6b) servable for benchmarks: copy
its config.json and add a synthetic tokenizer that covers the whole vocabulary.

    python benchmark/prepare_model.py ../shared/models/qwen3-0.6b .bench-models/qwen3-0.6b
    python -m minisgl --model .bench-models/qwen3-0.6b --dummy-weight
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

from minisgl.models.tiny import synthetic_tokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config_dir")
    p.add_argument("out_dir")
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    src = os.path.join(args.config_dir, "config.json")
    if os.path.abspath(src) != os.path.abspath(os.path.join(args.out_dir, "config.json")):
        shutil.copy(src, args.out_dir)
    vocab = json.load(open(src))["vocab_size"]
    synthetic_tokenizer(vocab).save_pretrained(args.out_dir)
    print(f"{args.out_dir}: config.json + a synthetic tokenizer of {vocab} tokens")


if __name__ == "__main__":
    main()
