"""--generation-config: the model's own sampling defaults (generation_config.json), used for the
fields a request leaves unset, as vLLM does. Model authors tune these (Qwen3: temperature 0.6,
top_p 0.95, top_k 20); ignoring them makes a model look worse than it is."""

from __future__ import annotations

import json
import os

from minisgl.core.request_fields import FIELDS, MODEL_DEFAULT_KEYS
from minisgl.utils.logger import get_logger

logger = get_logger(__name__)


def _config_file(setting: str, model: str | None) -> str | None:
    if setting == "none":
        return None
    if setting != "auto":
        return os.path.join(setting, "generation_config.json")
    if model is None:
        from minisgl.demo.model import demo_model_dir

        model = demo_model_dir()
    if os.path.isdir(model):
        return os.path.join(model, "generation_config.json")
    try:  # an HF id: the file the engine downloaded (no network from the API process)
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "generation_config.json")
    except Exception:  # noqa: BLE001 - no cache, no file: no defaults
        return None
    return found if isinstance(found, str) else None


def sampling_defaults(setting: str, model: str | None) -> dict[str, float | int]:
    """The sampling fields the model's generation config sets ({} when none or turned off).
    A config that does not sample (do_sample false) means greedy, as HF reads it."""
    path = _config_file(setting, model)
    if path is None or not os.path.exists(path):
        return {}
    with open(path) as f:
        config = json.load(f)
    defaults = {k: config[k] for k in MODEL_DEFAULT_KEYS if isinstance(config.get(k), (int, float))}
    if config.get("do_sample") is False:
        defaults = {"temperature": 0.0}
    if "top_k" in defaults and defaults["top_k"] == 0:  # HF's "off"
        defaults["top_k"] = -1
    for key in defaults:
        if FIELDS[key].type is float:  # the request models are strict: 1 is no float there
            defaults[key] = float(defaults[key])
    if defaults:
        logger.info("sampling defaults from %s: %s (--generation-config none turns them off)", path, defaults)
    return defaults
