"""GET /v1/models and /v1/models/{id} (what the openai client's models.list and models.retrieve
call) on the real server: every served name and its context length (max_model_len), as the
model's config gives it; an unknown id is a 404 in OpenAI's shape."""

from __future__ import annotations

import openai
import pytest
from transformers import AutoConfig

from tests.server.serving import tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

NAMES = ("org/tiny-qwen3", "tiny")  # a served name may hold a slash, as a Hub id does
# The arguments of test_request_errors.py, test_request_id.py and test_process_lifecycle.py: one server.
model_dir, server, client = tiny_qwen3_server("--served-model-name", *NAMES, "--dtype", "float32", "--num-pages", "256")


def test_each_served_name_is_retrieved_with_the_models_context_length(client, model_dir):
    context = AutoConfig.from_pretrained(model_dir).max_position_embeddings
    for name in NAMES:
        card = client.models.retrieve(name)
        assert card.id == name and card.object == "model" and card.owned_by == "minisgl"
        assert card.max_model_len == context
    assert [(m.id, m.max_model_len) for m in client.models.list().data] == [(n, context) for n in NAMES]


def test_an_unknown_model_is_a_404_naming_the_served_ones(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-4o")
    body = err.value.body
    assert body["code"] == "model_not_found" and body["param"] == "model"
    assert "'gpt-4o'" in body["message"] and "'org/tiny-qwen3'" in body["message"]
