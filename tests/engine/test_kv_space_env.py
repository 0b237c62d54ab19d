"""$HYBRIDLLM_CPU_KVCACHE_SPACE (vLLM's VLLM_CPU_KVCACHE_SPACE): the CPU KV budget in GiB when
no --kv-cache-memory is given; a bad value is refused naming the variable."""

from __future__ import annotations

import pytest

from hybridllm.config import CPU_DEFAULT_KV_CACHE_BYTES, KV_SPACE_ENV, cpu_default_kv_cache_bytes


def test_unset_is_two_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KV_SPACE_ENV, raising=False)
    assert cpu_default_kv_cache_bytes() == CPU_DEFAULT_KV_CACHE_BYTES == 2 << 30
    monkeypatch.setenv(KV_SPACE_ENV, " ")
    assert cpu_default_kv_cache_bytes() == 2 << 30


@pytest.mark.parametrize(("value", "expected"), [("1", 1 << 30), ("0.25", 1 << 28), ("3", 3 << 30)])
def test_gib(monkeypatch: pytest.MonkeyPatch, value: str, expected: int) -> None:
    monkeypatch.setenv(KV_SPACE_ENV, value)
    assert cpu_default_kv_cache_bytes() == expected


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf"])
def test_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(KV_SPACE_ENV, value)
    with pytest.raises(ValueError, match=f"{KV_SPACE_ENV} must be a positive number of GiB, "
                                         f"got '{value}'"):
        cpu_default_kv_cache_bytes()
