"""Shared fixtures for the parity tests of the API core's text pipeline (the Rust code both
frontends run, called through hybridllm._api, so no server or worker is needed) and of the
Rust frontend's start-up."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _find_binary() -> str | None:
    env = os.environ.get("HYBRIDLLM_RUST_FRONTEND_PATH")
    if env:
        return env
    venv_bin = Path(sys.executable).parent / "hybridllm-frontend"
    if venv_bin.exists():
        return str(venv_bin)
    return shutil.which("hybridllm-frontend")


@pytest.fixture(scope="session")
def frontend_bin() -> str:
    path = _find_binary()
    if not path:
        pytest.fail("hybridllm-frontend binary not found (set HYBRIDLLM_RUST_FRONTEND_PATH)")
    return path


@pytest.fixture(scope="session")
def model_dir(model_path: Path) -> Path:
    """The bundled model's folder (converted on first use; see tests/conftest.py)."""
    return model_path


def _text_tool(args: list[str], payload):
    """The API core's text pipeline driven as the parity tests ask (`render-chat --template P`,
    `tokenize --tokenizer P [--add-special-tokens]`, `decode-prefixes --tokenizer P
    [--keep-special-tokens] [--no-spaces-between-special-tokens]`), through hybridllm._api:
    the code both frontends run."""
    from hybridllm import _api

    cmd, flags = args[0], args[1:]
    path = flags[flags.index("--template" if cmd == "render-chat" else "--tokenizer") + 1]
    items = payload if isinstance(payload, list) else [payload]
    if cmd == "render-chat":
        template = _api.ChatTemplate(Path(path).read_bytes().decode("utf-8"))
        out = []
        for item in items:
            try:
                out.append({"prompt": template.render(json.dumps(item))})
            except ValueError as e:
                out.append({"error": str(e)})
        return out
    tok = _api.Tokenizer.from_file(path)
    if cmd == "tokenize":
        return [tok.encode(text, "--add-special-tokens" in flags) for text in items]
    assert cmd == "decode-prefixes", cmd
    opts = {"skip_special_tokens": "--keep-special-tokens" not in flags,
            "spaces_between_special_tokens": "--no-spaces-between-special-tokens" not in flags}
    out = []
    for ids in items:
        seq = _api.SequenceText([], [], False, **opts)
        deltas = [seq.push(tok, [i])[0] for i in ids]
        tail = seq.push(tok, [], "length")[0]
        out.append({"deltas": deltas, "tail": tail, "full": tok.decode(ids, **opts)})
    return out


@pytest.fixture(scope="session")
def run_text():
    """Runs one of `_text_tool`'s commands; returns (rc, json|None, error text)."""

    def run(args: list[str], payload) -> tuple[int, object, str]:
        try:
            return 0, _text_tool(args, payload), ""
        except ValueError as e:
            return 1, None, str(e)

    return run
