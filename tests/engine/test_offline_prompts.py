"""LLM.generate takes vLLM's prompt dicts (TextPrompt {"prompt"}, TokensPrompt
{"prompt_token_ids"}) beside strings and id lists, one or a list; other keys are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridllm import LLM, SamplingParams


def test_dict_prompts_as_vllm(model_path: Path) -> None:
    llm = LLM(model=str(model_path), mock_engine=True, max_model_len=256)
    params = SamplingParams(max_tokens=4, ignore_eos=True, temperature=0)
    text = "The capital of France is"
    ids = llm.generate(text, params, use_tqdm=False)[0].prompt_token_ids
    assert len(ids) == 5
    plain = llm.generate([text, ids], params, use_tqdm=False)
    dicts = llm.generate([{"prompt": text}, {"prompt_token_ids": ids}], params, use_tqdm=False)
    assert [o.prompt_token_ids for o in dicts] == [ids, ids]
    assert [o.outputs[0].token_ids for o in dicts] == [o.outputs[0].token_ids for o in plain]
    one = llm.generate({"prompt_token_ids": ids}, params, use_tqdm=False)
    assert len(one) == 1 and one[0].prompt_token_ids == ids
    with pytest.raises(ValueError, match="multi_modal_data not supported here"):
        llm.generate({"prompt": text, "multi_modal_data": {}}, params, use_tqdm=False)
    with pytest.raises(ValueError, match='needs "prompt" or "prompt_token_ids"'):
        llm.generate([{}], params, use_tqdm=False)
