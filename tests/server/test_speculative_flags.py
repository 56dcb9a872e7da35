"""The speculative decoding flags: an unknown drafter or an impossible setting is one line and exit
status 2 before anything loads; good values reach the scheduler's config under the same names."""

from __future__ import annotations

import pytest

from minisgl.server.args import parse_args
from tests.helpers import refused_flags


@pytest.mark.parametrize("argv,message", [
    (["--speculative", "medusa"], "invalid choice"),
    (["--speculative", "ngram", "--speculative-num-tokens", "0"], "--speculative-num-tokens must be >= 1"),
    (["--speculative-ngram-min", "3", "--speculative-ngram-max", "2"], "--speculative-ngram-min must be <="),
    (["--speculative-min-acceptance", "1.5"], "--speculative-min-acceptance must be in [0, 1]"),
    (["--speculative-max-batch", "0"], "--speculative-max-batch must be >= 1"),
    (["--speculative", "eagle3"], "--speculative eagle3 needs --draft-model PATH"),
    (["--speculative", "ngram", "--draft-model", "/heads/eagle3"], "--draft-model is the head of --speculative eagle3"),
])
def test_bad_speculative_flags_fail_with_a_message(argv, message, capsys):
    err = refused_flags(argv, capsys)
    assert message in err and err.count("\n") == 1


def test_speculative_flags_reach_the_scheduler_config():
    from minisgl.server.runtime.workers import scheduler_config

    argv = ["--speculative", "ngram", "--speculative-num-tokens", "6", "--speculative-ngram-min", "2",
            "--speculative-ngram-max", "3", "--speculative-max-batch", "8", "--speculative-min-acceptance", "0.5"]
    config = scheduler_config(parse_args(argv), "unused")
    assert (config.speculative, config.speculative_num_tokens, config.speculative_ngram_min,
            config.speculative_ngram_max, config.speculative_max_batch,
            config.speculative_min_acceptance) == ("ngram", 6, 2, 3, 8, 0.5)
    assert scheduler_config(parse_args([]), "unused").speculative is None  # off unless asked for
    eagle3 = scheduler_config(parse_args(["--speculative", "eagle3", "--draft-model", "/heads/e3"]), "unused")
    assert (eagle3.speculative, eagle3.draft_model) == ("eagle3", "/heads/e3")
