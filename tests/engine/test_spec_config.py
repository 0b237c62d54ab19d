"""speculative_config (vLLM's names): validation, defaults, and the paths that carry it."""

from __future__ import annotations

import argparse
import json

import pytest

from hybridllm.cli.serve import worker_argv
from hybridllm.config import EngineArgs, SpeculativeConfig


def test_vllm_defaults() -> None:
    c = SpeculativeConfig.from_value({"method": "ngram", "num_speculative_tokens": 3})
    assert (c.prompt_lookup_min, c.prompt_lookup_max) == (5, 5)
    c = SpeculativeConfig.from_value({"num_speculative_tokens": 3, "prompt_lookup_max": 4})
    assert (c.method, c.prompt_lookup_min, c.prompt_lookup_max) == ("ngram", 4, 4)
    c = SpeculativeConfig.from_value('{"num_speculative_tokens": 2, "prompt_lookup_min": 2}')
    assert (c.num_speculative_tokens, c.prompt_lookup_min, c.prompt_lookup_max) == (2, 2, 2)


@pytest.mark.parametrize("value, message", [
    ({"method": "eagle", "num_speculative_tokens": 3},
     "speculative_config.method must be one of 'ngram'; got 'eagle'"),
    ({"method": "ngram", "num_speculative_tokens": 0},
     "speculative_config.num_speculative_tokens must be an integer of at least 1; got 0"),
    ({"method": "ngram"}, "speculative_config.num_speculative_tokens is required"),
    ({"num_speculative_tokens": 2, "prompt_lookup_min": 0},
     "speculative_config.prompt_lookup_min must be an integer of at least 1; got 0"),
    ({"num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
     "speculative_config.prompt_lookup_min (4) must be <= prompt_lookup_max (2)"),
    ({"num_speculative_tokens": 2, "model": "x"},
     "speculative_config: unknown field(s) model; allowed: method, num_speculative_tokens, "
     "prompt_lookup_max, prompt_lookup_min"),
    ("{not json", "speculative_config is not valid JSON"),
])
def test_refused(value: object, message: str) -> None:
    with pytest.raises(ValueError) as e:
        SpeculativeConfig.from_value(value)  # type: ignore[arg-type]
    assert str(e.value).startswith(message)


def test_resolve_refuses_bad_config_and_mock_engine(model_path) -> None:
    with pytest.raises(ValueError, match="method must be one of 'ngram'"):
        EngineArgs(model=str(model_path),
                   speculative_config={"method": "medusa", "num_speculative_tokens": 2}).resolve()
    with pytest.raises(ValueError, match="--mock-engine has none"):
        EngineArgs(model=str(model_path), mock_engine=True,
                   speculative_config={"num_speculative_tokens": 2}).resolve()
    config = EngineArgs(model=str(model_path),
                        speculative_config='{"num_speculative_tokens": 3}').resolve()
    assert config.speculative == SpeculativeConfig(3, "ngram", 5, 5)


def test_serve_flag_reaches_the_worker() -> None:
    """--speculative-config parses, and the spawned worker gets it back as the same JSON."""
    parser = argparse.ArgumentParser()
    EngineArgs.add_cli_args(parser)
    parser.add_argument("--shutdown-timeout", type=float, default=10.0)
    text = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}'
    args = parser.parse_args(["--speculative-config", text])
    argv = worker_argv(args, "unix:///tmp/x.sock")
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == json.loads(text)
    # The worker's own parser reads it back into the same engine args.
    worker = argparse.ArgumentParser()
    EngineArgs.add_cli_args(worker)
    back = EngineArgs.from_cli_args(worker.parse_args(argv[i:i + 2]))
    assert SpeculativeConfig.from_value(back.speculative_config) == SpeculativeConfig(4, "ngram",
                                                                                      3, 3)
    # A dict (LLM-style engine args) is written as JSON too.
    args.speculative_config = {"num_speculative_tokens": 2}
    argv = worker_argv(args, "unix:///tmp/x.sock")
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "num_speculative_tokens": 2}
