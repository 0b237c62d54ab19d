"""Unit checks of the Python frontend's serde-compatible formatting and text pipeline."""

from __future__ import annotations

import pytest

from hybridllm.entrypoints.openai.jsonfmt import dumps, rust_display, ryu
from hybridllm.text.stop import StopChecker


@pytest.mark.parametrize("x,want", [
    (0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (100.0, "100.0"), (-9999.0, "-9999.0"),
    (0.5, "0.5"), (1e-5, "0.00001"), (1.5e-5, "0.000015"), (1e-6, "1e-6"), (1.5e-7, "1.5e-7"),
    (1e15, "1000000000000000.0"), (1e16, "1e16"), (1.25e17, "1.25e17"),
    (-0.019685963168740273, "-0.019685963168740273"),
])
def test_ryu_like_serde_json(x: float, want: str) -> None:
    assert ryu(x) == want


@pytest.mark.parametrize("x,want", [(3.0, "3"), (2.5, "2.5"), (-2.0, "-2"), (1e-7, "0.0000001"),
                                    (1e20, "100000000000000000000"), (0.0, "0")])
def test_rust_display(x: float, want: str) -> None:
    assert rust_display(x) == want


def test_dumps_compact_ordered() -> None:
    assert dumps({"b": [1, 2.0, None, True], "a": "é\n\u0001"}) == \
        '{"b":[1,2.0,null,true],"a":"é\\n\\u0001"}'


def test_stop_checker_like_rust() -> None:
    c = StopChecker(["STOP"], False)
    assert [c.push(d) for d in ["Hello S", "T", "OP and more"]] == \
        [("Hello ", None), ("", None), ("", "STOP")]
    c = StopChecker(["世界", "b"], False)
    assert c.push("你好世") == ("你好", None)
    assert c.push("界 b") == ("", "世界")
