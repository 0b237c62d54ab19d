"""Start-up failures of the Rust frontend must be loud and non-zero, without a worker."""

import json
import subprocess
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2].parent / "shared" / "chat_templates"


def _run(frontend_bin, args_json: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            frontend_bin,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--engine-address",
            "unix:///nonexistent/hybridllm-test.sock",
            "--args-json",
            json.dumps({"engine_connect_timeout_s": 0.5, **args_json}),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_broken_chat_template_exits_nonzero(frontend_bin, tmp_path):
    bad = TEMPLATES / "template_vicuna.jinja"
    if not bad.exists():
        bad = tmp_path / "bad.jinja"
        bad.write_text("{% if messages %}unterminated")
    proc = _run(frontend_bin, {"chat_template": str(bad)})
    assert proc.returncode != 0
    assert "invalid chat template" in proc.stderr and "syntax error" in proc.stderr, proc.stderr


def test_unknown_args_json_key_exits_nonzero(frontend_bin):
    proc = _run(frontend_bin, {"no_such_option": 1})
    assert proc.returncode != 0
    assert "invalid --args-json" in proc.stderr, proc.stderr


def test_unreachable_engine_exits_nonzero(frontend_bin):
    proc = _run(frontend_bin, {})
    assert proc.returncode != 0
    assert "cannot reach the engine" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_cli_basics(frontend_bin, args):
    proc = subprocess.run([frontend_bin, *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "hybridllm-frontend" in proc.stdout
