"""A --model that is not a local directory names a Hugging Face Hub model: before any worker
starts, its config.json is fetched (or found in the Hub cache), so a model that cannot be had is
one line naming the reason, not every worker's traceback and retries."""

from __future__ import annotations

import logging


def check_hub_model(model: str) -> None:
    """Raise ValueError, in one line, if `model` (a Hub id) cannot be downloaded nor found cached."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its retries' warnings: the one line below says it all
    try:
        hf_hub_download(model, "config.json")
    except HFValidationError:
        raise ValueError(f"--model {model!r}: neither a local directory nor a Hugging Face Hub id "
                         "(org/name)") from None
    except GatedRepoError:
        raise ValueError(f"--model {model}: a gated model on the Hugging Face Hub; accept its terms there and "
                         "set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise ValueError(f"--model {model}: no such model on the Hugging Face Hub (a private one needs HF_TOKEN), "
                         "and no such local directory") from None
    except RevisionNotFoundError:
        raise ValueError(f"--model {model}: no such revision on the Hugging Face Hub") from None
    except LocalEntryNotFoundError:  # offline, or the Hub unreachable, and not in the cache
        from huggingface_hub import constants

        why = ("HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE
               else f"{constants.ENDPOINT} could not be reached")  # HF_ENDPOINT, as huggingface_hub reads it
        raise ValueError(f"--model {model}: not a local directory, and not in the Hub cache; {why} to download it "
                         "(give a local directory, or download the model first where the Hub can be reached)") from None
    except EntryNotFoundError:
        raise ValueError(f"--model {model}: the Hub model has no config.json (not a transformers model)") from None
    finally:
        hub_log.setLevel(level)


__all__ = ["check_hub_model"]
