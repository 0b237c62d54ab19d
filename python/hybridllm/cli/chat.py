"""`hybridllm chat` and `hybridllm complete`: a terminal client of any OpenAI-compatible server
(vLLM's `vllm chat` / `vllm complete`), on the official `openai` client, replies streamed.

In `chat`, lines starting with `/` are commands: `/system TEXT` sets the system prompt,
`/clear` forgets the conversation (the system prompt stays), `/exit` (or Ctrl-D) quits.
Ctrl-C stops a reply mid-stream and keeps the conversation.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000/v1"
HELP = "commands: /system TEXT, /clear, /exit"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", "--url", dest="base_url", default=DEFAULT_URL,
                   help=f"the server's OpenAI API root (default {DEFAULT_URL})")
    p.add_argument("--model-name", default=None,
                   help="model to ask (default: the first one /v1/models lists)")
    p.add_argument("--api-key", default=None,
                   help="bearer key (default: $OPENAI_API_KEY, else none)")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--temperature", type=float, default=None)


def add_parsers(sub: Any) -> None:
    chat = sub.add_parser("chat", help="Interactive streaming chat with a server.")
    _common(chat)
    chat.add_argument("--system-prompt", default=None)
    chat.set_defaults(func=run_chat)
    complete = sub.add_parser("complete", help="One completion of a prompt, streamed.")
    _common(complete)
    complete.add_argument("prompt", nargs="?", default=None,
                          help="the prompt (default: read from standard input)")
    complete.set_defaults(func=run_complete)


def _client(args: argparse.Namespace) -> tuple[Any, str]:
    import openai

    logging.getLogger("httpx").setLevel(logging.WARNING)  # no log line per request
    key = args.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    client = openai.OpenAI(base_url=args.base_url, api_key=key)
    model = args.model_name or client.models.list().data[0].id
    return client, model


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in (("max_tokens", args.max_tokens),
                              ("temperature", args.temperature)) if v is not None}


def _print_stream(stream: Any, text_of: Any) -> str:
    """Writes each chunk's text as it arrives; returns the whole text (so far, if stopped)."""
    parts: list[str] = []
    try:
        for chunk in stream:
            piece = text_of(chunk) if chunk.choices else None
            if piece:
                parts.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
    except KeyboardInterrupt:
        stream.close()  # the server aborts the request when the connection goes
    sys.stdout.write("\n")
    sys.stdout.flush()
    return "".join(parts)


def run_chat(args: argparse.Namespace) -> int:
    try:
        import readline  # noqa: F401 - line editing and ↑ history for input()
    except ImportError:
        pass
    client, model = _client(args)
    system = args.system_prompt
    history: list[dict[str, str]] = []
    print(f"Chatting with {model} at {args.base_url} ({HELP})")
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        cmd, _, rest = line.strip().partition(" ")
        if cmd == "/exit":
            return 0
        if cmd == "/clear":
            history.clear()
            print("(conversation cleared)")
            continue
        if cmd == "/system":
            system = rest.strip() or None
            print(f"(system prompt {'set' if system else 'removed'})")
            continue
        if not cmd:
            continue
        if cmd.startswith("/"):
            print(f"(unknown command {cmd}; {HELP})")
            continue
        history.append({"role": "user", "content": line})
        messages = ([{"role": "system", "content": system}] if system else []) + history
        stream = client.chat.completions.create(model=model, messages=messages, stream=True,
                                                **_sampling(args))
        reply = _print_stream(stream, lambda c: c.choices[0].delta.content)
        history.append({"role": "assistant", "content": reply})


def run_complete(args: argparse.Namespace) -> int:
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    client, model = _client(args)
    stream = client.completions.create(model=model, prompt=prompt, stream=True,
                                       **_sampling(args))
    _print_stream(stream, lambda c: c.choices[0].text)
    return 0
