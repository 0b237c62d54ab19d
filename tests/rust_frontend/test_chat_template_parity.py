"""Every template in ../shared/chat_templates, and those the conversion writes for bundled
models whose GGUF has none (models/chat_templates.py: Gemma 3's), must render byte-identically
in the Rust frontend (minijinja) and in transformers' apply_chat_template (Jinja2)."""

import json
from pathlib import Path

import pytest

from hybridllm.models.chat_templates import GEMMA3_CHAT_TEMPLATE

REPO = Path(__file__).resolve().parents[2]

TEMPLATES = REPO.parent / "shared" / "chat_templates"
BUNDLED = {"bundled:gemma3.jinja": GEMMA3_CHAT_TEMPLATE}
BROKEN = {"template_vicuna.jinja"}  # has a Jinja syntax error: both sides must refuse it

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. 'Paris'"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "description": "Forecast days"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "Query text"}},
                "required": ["query"],
            },
        },
    },
]

TOOL_CALL = {
    "id": "call_abc123",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
}

CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nMake it short."},
    ],
    "unicode": [
        {"role": "user", "content": "你好，世界！🌍 Ça va? こんにちは 👨‍👩‍👧"},
        {"role": "assistant", "content": "很好 😀 — “merci”"},
        {"role": "user", "content": "  spaced \t out  "},
    ],
    "ends_with_assistant": [
        {"role": "user", "content": "Write a haiku"},
        {"role": "assistant", "content": "Autumn moonlight"},
    ],
    "tools": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_abc123", "content": '{"temp": 21, "sky": "clear"}'},
        {"role": "assistant", "content": "It is 21°C and clear."},
        {"role": "user", "content": "Thanks"},
    ],
}


def _templates():
    if not TEMPLATES.is_dir():
        return [*BUNDLED,
                pytest.param(None, marks=pytest.mark.skip(reason=f"{TEMPLATES} is absent"))]
    return [*BUNDLED, *sorted(p.name for p in TEMPLATES.glob("*.jinja"))]


@pytest.fixture(scope="module")
def hf_tok(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def _hf_render(tok, text, case):
    try:
        return {
            "prompt": tok.apply_chat_template(
                case["messages"],
                chat_template=text,
                tools=case.get("tools"),
                add_generation_prompt=case["add_generation_prompt"],
                continue_final_message=case["continue_final_message"],
                tokenize=False,
            )
        }
    except Exception as e:  # noqa: BLE001 - any refusal counts as an error
        return {"error": str(e)}


@pytest.mark.parametrize("name", _templates())
def test_template_parity(name, run_text, hf_tok, tmp_path):
    if name in BUNDLED:
        path = tmp_path / name.split(":")[1]
        path.write_text(BUNDLED[name])
    else:
        path = TEMPLATES / name
    text = path.read_bytes().decode("utf-8")  # keep CRLF files as stored
    if name in BROKEN:
        import jinja2

        case = {"messages": CONVERSATIONS["single_user"], "add_generation_prompt": True,
                "continue_final_message": False}
        assert "error" in _hf_render(hf_tok, text, case)  # transformers refuses it
        with pytest.raises(jinja2.TemplateSyntaxError):
            jinja2.Environment().parse(text)  # and the reason is the syntax
        rc, _, err = run_text(["render-chat", "--template", str(path)], [])
        assert rc != 0 and "invalid chat template" in err, err
        return
    cases = []
    for conv_name, messages in CONVERSATIONS.items():
        for agp in (True, False):
            case = {
                "messages": messages,
                "add_generation_prompt": agp,
                "continue_final_message": False,
                "bos_token": hf_tok.bos_token,
                "eos_token": hf_tok.eos_token,
                "kwargs": {
                    k: v
                    for k, v in hf_tok.special_tokens_map.items()
                    if k not in ("bos_token", "eos_token")
                },
            }
            if conv_name == "tools":
                case["tools"] = TOOLS
            cases.append((conv_name, case))
        if messages[-1]["role"] == "assistant":
            cfm = dict(cases[-1][1], continue_final_message=True)
            cases.append((conv_name + "+continue", cfm))
    rc, out, err = run_text(["render-chat", "--template", str(path)], [c for _, c in cases])
    assert rc == 0, err
    rendered = 0
    for (conv_name, case), got in zip(cases, out):
        want = _hf_render(hf_tok, text, json.loads(json.dumps(case)))
        label = f"{name}/{conv_name}/agp={case['add_generation_prompt']}"
        if "error" in want:
            assert "error" in got, (
                f"{label}: transformers refused ({want['error']}) but Rust rendered"
            )
        else:
            assert got.get("prompt") == want["prompt"], f"{label}: {got.get('error')}"
            rendered += 1
    assert rendered > 0, f"{name}: no conversation rendered at all"


# Constructs that differ between Jinja2 and minijinja unless handled explicitly.
EXTRA_TEMPLATES = {
    "generation_tags": "{% for m in messages %}{%- generation -%} [{{ m.content }}] "
    "{%- endgeneration %}\n{% endfor %}",
    "python_values": "{{ messages[0] }}|{{ messages[0].x }}|{{ tools|string }}|{{ none }}"
    "|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ messages|length }}",
    "tojson_options": "{{ messages|tojson }}{{ messages|tojson(indent=2) }}"
    "{{ messages[0]|tojson(sort_keys=true) }}{{ 'é\"<'|tojson }}{{ 3.5|tojson }}",
    "string_methods": "{% for m in messages %}{{ m.content.strip().upper() }}"
    "{{ m.role.startswith('u') }}"
    "{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}{% endfor %}",
    "loop_controls": "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
    "{% if m.role == 'system' %}{% continue %}{% endif %}{{ loop.index0 }}:{{ m.content }}\n"
    "{% endfor %}",
    "namespace_and_filters": "{% set ns = namespace(n=0) %}{% for m in messages %}"
    "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"
    "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}"
    "{{ (messages|last).content|trim }}",
}


@pytest.mark.parametrize("name", sorted(EXTRA_TEMPLATES))
def test_semantics_parity(name, run_text, hf_tok, tmp_path):
    text = EXTRA_TEMPLATES[name]
    path = tmp_path / f"{name}.jinja"
    path.write_text(text)
    case = {
        "messages": CONVERSATIONS["multi_turn"],
        "add_generation_prompt": False,
        "continue_final_message": False,
        "bos_token": hf_tok.bos_token,
        "eos_token": hf_tok.eos_token,
        "tools": TOOLS,
    }
    rc, out, err = run_text(["render-chat", "--template", str(path)], [case])
    assert rc == 0, err
    want = _hf_render(hf_tok, text, case)
    assert out[0] == want
