"""Golden references: what the reference libraries answer on the bundled models, stored as
small JSON fixtures beside this file, so the suite compares against them instead of running
transformers, sentence-transformers or lm-eval's hf backend again on every run.

Each fixture holds its `key`: the digest of the model's weight files, the versions of the
libraries that made it, and a digest of its inputs (prompts, settings). `load(name)` returns
the fixture's data when its key is the current one; otherwise (another transformers version on
a fresh machine, a re-converted model, changed prompts) the reference is computed live, once,
cached under ~/.cache/hybridllm/golden, and a warning says to run

    python ci/make_references.py          # rewrite the fixtures
    python ci/make_references.py --check  # recompute and compare, exit 1 if any differs

`tests/golden/test_live.py` recomputes one case of each kind in every run and compares it with
the fixture, so a fixture that no longer matches its library cannot hide a regression.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from hybridllm.paths import cache_dir

FIXTURES = Path(__file__).parent


@dataclass(frozen=True)
class Kind:
    """One fixture: the model it is about, the libraries that make it, its inputs (a JSON
    value) and the function that computes its data from them."""

    name: str
    model: Callable[[], Path]
    libraries: tuple[str, ...]
    inputs: Callable[[], Any]
    compute: Callable[[Any], Any]


KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    KINDS[kind.name] = kind
    return kind


def _digest_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def model_digest(folder: Path) -> str:
    """sha256 over the folder's weight files (names and bytes); remembered per file size and
    mtime, so a run hashes the 0.5 GB of the default model once, not per fixture."""
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    if not files:
        raise FileNotFoundError(f"no weight files in {folder}")
    memo_path = cache_dir() / "golden" / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    stamp = ";".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
    if stamp in memo:
        return memo[stamp]
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        with p.open("rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    memo[stamp] = h.hexdigest()[:16]
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_path.with_suffix(f".{os.getpid()}")
    tmp.write_text(json.dumps(memo))
    tmp.replace(memo_path)
    return memo[stamp]


def current_key(kind: Kind) -> dict[str, str]:
    key = {"model": model_digest(kind.model()), "inputs": _digest_json(kind.inputs())}
    key.update({lib: version(lib) for lib in kind.libraries})
    return key


def fixture_path(name: str) -> Path:
    return FIXTURES / f"{name}.json"


def _cached_path(name: str, key: dict[str, str]) -> Path:
    return cache_dir() / "golden" / f"{name}-{_digest_json(key)}.json"


def _write(path: Path, key: dict[str, str], data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": key, "data": data}, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def stored(name: str) -> tuple[dict[str, str], Any] | None:
    """The committed fixture's (key, data), or None."""
    path = fixture_path(name)
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    return doc["key"], doc["data"]


def _kind(name: str) -> Kind:
    import tests.golden.kinds  # noqa: F401 - registers every kind

    return KINDS[name]


def load(name: str) -> Any:
    """The reference data of `name` for the current models and libraries (see the module)."""
    kind = _kind(name)
    key = current_key(kind)
    fixture = stored(name)
    if fixture is not None and fixture[0] == key:
        return fixture[1]
    cached = _cached_path(name, key)
    if cached.exists():
        return json.loads(cached.read_text())["data"]
    was = fixture[0] if fixture else None
    warnings.warn(
        f"golden reference {name!r} does not match this machine (fixture key {was}, "
        f"current {key}): computed live; run `python ci/make_references.py` to refresh it",
        stacklevel=2,
    )
    data = kind.compute(kind.inputs())
    _write(cached, key, data)
    return data


def make(name: str) -> tuple[dict[str, str], Any]:
    """Computes `name` now and writes its fixture; returns (key, data)."""
    kind = _kind(name)
    key, data = current_key(kind), kind.compute(kind.inputs())
    _write(fixture_path(name), key, data)
    return key, data
