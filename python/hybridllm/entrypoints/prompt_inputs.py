"""The offline `LLM`'s prompt forms, as vLLM takes them: a string, token ids, or vLLM's
TextPrompt / TokensPrompt dicts ({"prompt": ...} / {"prompt_token_ids": [...]}), one or a
list of them."""

from __future__ import annotations

from typing import Any

PromptType = str | list[int] | dict[str, Any]


def is_single_prompt(prompts: Any) -> bool:
    """One prompt (not a list of them)."""
    return isinstance(prompts, (str, dict)) or (
        isinstance(prompts, list) and (not prompts or isinstance(prompts[0], int))
    )


def prompt_of(prompt: PromptType) -> str | list[int]:
    """The engine's prompt: the text or the token ids."""
    if isinstance(prompt, dict):
        other = sorted(set(prompt) - {"prompt", "prompt_token_ids"})
        if other:
            raise ValueError(f"prompts: {', '.join(other)} not supported here (a dict prompt "
                             'takes "prompt" or "prompt_token_ids").')
        if "prompt_token_ids" in prompt:
            return list(prompt["prompt_token_ids"])
        if "prompt" in prompt:
            return str(prompt["prompt"])
        raise ValueError('prompts: a dict prompt needs "prompt" or "prompt_token_ids".')
    return prompt
