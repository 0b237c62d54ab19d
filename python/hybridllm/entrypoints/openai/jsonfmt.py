"""JSON and number formatting exactly as the Rust frontend's serde_json prints them."""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.responses import Response


def _digits(x: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of abs(x) and exponent k: abs(x) = int(digits) * 10**k."""
    r = repr(abs(x))
    mant, _, exp = r.partition("e")
    ip, _, fp = mant.partition(".")
    digits = (ip + fp).lstrip("0") or "0"
    k = int(exp or 0) - len(fp)
    stripped = digits.rstrip("0")
    k += len(digits) - len(stripped)
    return stripped or "0", k


def ryu(x: float) -> str:
    """serde_json's float output (the `ryu` crate): 1e-7, 0.00001, 100.0, 1e16."""
    if math.isnan(x) or math.isinf(x):
        return "null"  # serde_json writes non-finite floats as null
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    digits, k = _digits(x)
    n = len(digits)
    kk = n + k
    if 0 <= k and kk <= 16:
        s = digits + "0" * k + ".0"
    elif 0 < kk <= 16:
        s = digits[:kk] + "." + digits[kk:]
    elif -5 < kk <= 0:
        s = "0." + "0" * (-kk) + digits
    elif n == 1:
        s = f"{digits}e{kk - 1}"
    else:
        s = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return "-" + s if x < 0 else s


def rust_display(x: float) -> str:
    """Rust's `{}` of an f64 (used in validation messages): 3 not 3.0, never an exponent."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    if x == 0:
        return sign + "0"
    digits, k = _digits(x)
    kk = len(digits) + k
    if k >= 0:
        s = digits + "0" * k
    elif kk > 0:
        s = digits[:kk] + "." + digits[kk:]
    else:
        s = "0." + "0" * (-kk) + digits
    return sign + s


def dumps(value: Any) -> str:
    """Compact JSON, key order kept (serde_json with preserve_order), floats as ryu prints."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(v: Any, out: list[str]) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(ryu(v))
    elif isinstance(v, str):
        out.append(json.dumps(v, ensure_ascii=False))
    elif isinstance(v, dict):
        out.append("{")
        for i, (k, item) in enumerate(v.items()):
            if i:
                out.append(",")
            out.append(json.dumps(str(k), ensure_ascii=False))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"cannot serialise {type(v).__name__}")


class RustJSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")
