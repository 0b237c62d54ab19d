"""The golden references the suite uses, each registered with its inputs and the function that
computes it (what the tests themselves used to run on every run):

- `greedy`: transformers' greedy `generate` on the bundled model (tests/engine/test_greedy_parity);
- `beams`: transformers' beam search, each returned beam with its score and its score
  recomputed by a forward pass (tests/beam/test_beam_parity);
- `lm_eval_hf`: lm-eval's own `hf` backend on the repo's tasks (tests/ecosystem/test_lm_eval);
- `st_embeddings`: sentence-transformers on the embedding corpus (tests/pooling,
  tests/conformance/test_embeddings), as little-endian float32 in base64.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from hybridllm.models.resolve import DEFAULT_EMBEDDING_MODEL, resolve_model
from tests.golden import Kind, register

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "List three colors:",
    "The quick brown fox",
    "Water boils at",
    "Translate to French: Good morning",
    "In 1969, humans first",
]
EOS = 2  # SmolLM2's EOS (also its pad token)

GREEDY_MAX_TOKENS = 32

BEAM_IGNORE_EOS_KS = (2, 4)
BEAM_IGNORE_EOS_TOKENS = 24
BEAM_CHAT_TOKENS = 20
BEAM_CHATS = [
    "What is 2 + 2? Answer with a number only.",
    "Name one primary color. One word.",
    "What is the capital of Italy? One word.",
    "Say hello in Spanish. One word.",
    "Is water wet? Answer yes or no.",
    "What is the opposite of hot? One word.",
]
# The full grid early_stopping {False, True} x length_penalty {0.5, 2.0} at k=4, and two of
# its corners again at k=2.
BEAM_EOS_GRID = [(4, es, lp) for es in (False, True) for lp in (0.5, 2.0)] + [
    (2, False, 0.5), (2, True, 2.0)]

LM_EVAL_TASKS_DIR = Path(__file__).parents[1] / "ecosystem" / "lm_eval_tasks"
LM_EVAL_TASKS = ["hybridllm_mc", "hybridllm_gen"]

ST_BATCH_SIZE = 32
ST_TRUNCATIONS = (3, 16, 100)


def default_model() -> Path:
    return resolve_model(None)


def embedding_model() -> Path:
    return resolve_model(DEFAULT_EMBEDDING_MODEL)


@lru_cache(maxsize=1)
def _tokenizer():
    from hybridllm.text.tokenizer import load_tokenizer

    return load_tokenizer(default_model())[0]


def prompt_ids(prompt: str) -> list[int]:
    """A plain prompt's ids, as LLM.generate makes them."""
    return _tokenizer().encode(prompt).ids


def chat_ids(question: str) -> list[int]:
    """A one-turn chat prompt's ids through the model's own template, generation prompt on."""
    from hybridllm.text.chat_template import render_chat

    template = (default_model() / "chat_template.jinja").read_text()
    text = render_chat(template, [{"role": "user", "content": question}],
                       add_generation_prompt=True)
    return _tokenizer().encode(text, add_special_tokens=False).ids


@lru_cache(maxsize=1)
def hf_model():
    """transformers' model of the bundled default, fp32 (loaded once per process)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(default_model(), dtype=torch.float32).eval()


# --- greedy ------------------------------------------------------------------------------------

def greedy_inputs() -> dict[str, Any]:
    return {"prompt_ids": [prompt_ids(p) for p in PROMPTS], "max_tokens": GREEDY_MAX_TOKENS}


def hf_greedy(ids: list[int], max_tokens: int) -> list[int]:
    """transformers' greedy continuation of `ids`, exactly `max_tokens` long (EOS masked
    before, as min_new_tokens does)."""
    import torch

    x = torch.tensor([ids])
    with torch.inference_mode():
        gen = hf_model().generate(
            x, attention_mask=torch.ones_like(x), max_new_tokens=max_tokens,
            min_new_tokens=max_tokens, do_sample=False, pad_token_id=EOS,
        )
    return gen[0, x.shape[1]:].tolist()


def greedy_compute(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"tokens": [hf_greedy(ids, inputs["max_tokens"]) for ids in inputs["prompt_ids"]]}


register(Kind("greedy", default_model, ("transformers",), greedy_inputs, greedy_compute))


# --- beams -------------------------------------------------------------------------------------

def beam_case(k: int, early_stopping: bool = False, length_penalty: float = 1.0) -> str:
    return f"k={k},early_stopping={early_stopping},length_penalty={length_penalty}"


def beams_inputs() -> dict[str, Any]:
    return {
        "ignore_eos": {"prompt_ids": [prompt_ids(p) for p in PROMPTS[:6]],
                       "max_tokens": BEAM_IGNORE_EOS_TOKENS,
                       "cases": [[k, False, 1.0] for k in BEAM_IGNORE_EOS_KS]},
        "eos": {"prompt_ids": [chat_ids(q) for q in BEAM_CHATS],
                "max_tokens": BEAM_CHAT_TOKENS,
                "cases": [list(c) for c in BEAM_EOS_GRID]},
    }


def hf_beams(
    ids: list[int], k: int, max_tokens: int, ignore_eos: bool,
    early_stopping: bool | str = False, length_penalty: float = 1.0,
) -> list[tuple[list[int], float]]:
    """transformers' k returned beams: (generated ids up to and with the EOS, score)."""
    import torch

    x = torch.tensor([ids])
    with torch.inference_mode():
        out = hf_model().generate(
            x, attention_mask=torch.ones_like(x), num_beams=k, num_return_sequences=k,
            do_sample=False, length_penalty=length_penalty, early_stopping=early_stopping,
            max_new_tokens=max_tokens, min_new_tokens=max_tokens if ignore_eos else 0,
            pad_token_id=EOS, output_scores=True, return_dict_in_generate=True,
        )
    beams = []
    for seq, score in zip(out.sequences, out.sequences_scores):
        gen = seq[len(ids):].tolist()
        if EOS in gen:  # the EOS that ended it, then padding (pad is EOS here)
            gen = gen[: gen.index(EOS) + 1]
        beams.append((gen, float(score)))
    return beams


def hf_score(ids: list[int], gen: list[int], ignore_eos: bool, length_penalty: float) -> float:
    """A beam's score as transformers computes it: fp32 log-softmax (EOS masked for
    ignore_eos), summed over the generated ids, / generated length ** length_penalty."""
    import torch

    full = torch.tensor([ids + gen])
    with torch.inference_mode():
        logprobs = hf_model()(full).logits[0].float().log_softmax(-1)
        if ignore_eos:
            logprobs[:, EOS] = float("-inf")
    rows = torch.arange(len(ids) - 1, len(ids) - 1 + len(gen))
    cum = logprobs[rows, torch.tensor(gen)].sum().item()
    return cum / (len(gen) ** length_penalty)


def beams_for(ids: list[int], k: int, max_tokens: int, ignore_eos: bool, early_stopping: bool,
              length_penalty: float) -> list[list[Any]]:
    """[generated ids, transformers' score, the score recomputed by hf_score] per beam."""
    return [[gen, score, hf_score(ids, gen, ignore_eos, length_penalty)]
            for gen, score in hf_beams(ids, k, max_tokens, ignore_eos, early_stopping,
                                       length_penalty)]


def beams_compute(inputs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part, ignore_eos in (("ignore_eos", True), ("eos", False)):
        spec = inputs[part]
        out[part] = {
            beam_case(k, es, lp): [beams_for(ids, k, spec["max_tokens"], ignore_eos, es, lp)
                                   for ids in spec["prompt_ids"]]
            for k, es, lp in spec["cases"]
        }
    return out


register(Kind("beams", default_model, ("transformers",), beams_inputs, beams_compute))


# --- lm-eval's hf backend ----------------------------------------------------------------------

def run_lm_eval(out: Path, model: str, model_args: str, *extra: str,
                env: dict[str, str] | None = None) -> str:
    """Runs the lm_eval CLI (offline) on the repo's tasks; returns its log."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    cmd = [sys.executable, "-m", "lm_eval", "--model", model, "--model_args", model_args,
           "--tasks", ",".join(LM_EVAL_TASKS), "--include_path", str(LM_EVAL_TASKS_DIR),
           "--log_samples", "--output_path", str(out), *extra]
    # The task files name their data relative to the task folder.
    r = subprocess.run(cmd, cwd=LM_EVAL_TASKS_DIR, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r.stdout + r.stderr


def lm_eval_samples(out: Path, task: str) -> list[dict[str, Any]]:
    """One run's logged samples of `task`, in doc_id order."""
    (path,) = glob.glob(str(out / "*" / f"samples_{task}_*.jsonl"))
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    rows.sort(key=lambda r: r["doc_id"])
    assert [r["doc_id"] for r in rows] == list(range(len(rows)))
    return rows


def lm_eval_accuracy(out: Path) -> float:
    (path,) = glob.glob(str(out / "*" / "results_*.json"))
    return json.loads(Path(path).read_text())["results"][LM_EVAL_TASKS[0]]["acc,none"]


def lm_eval_summary(out: Path) -> dict[str, Any]:
    """What the tests compare of a run: per MC doc its (loglikelihood, is-greedy) pairs and
    acc, per generation doc its text, and the MC accuracy."""
    mc, gen = (lm_eval_samples(out, t) for t in LM_EVAL_TASKS)
    return {
        "mc": [{"resps": [[float(ll), bool(greedy)] for ll, greedy in r["filtered_resps"]],
                "acc": r["acc"]} for r in mc],
        "gen": [r["filtered_resps"][0] for r in gen],
        "acc": lm_eval_accuracy(out),
    }


def lm_eval_inputs() -> dict[str, Any]:
    files = sorted(LM_EVAL_TASKS_DIR.iterdir())
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + p.read_bytes())
    return {"tasks": LM_EVAL_TASKS, "files": h.hexdigest()[:16],
            "model_args": "dtype=float32", "batch_size": 8}


def lm_eval_compute(inputs: dict[str, Any], limit: int | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hybridllm-lm-eval-hf-") as tmp:
        extra = ["--device", "cpu", "--batch_size", str(inputs["batch_size"])]
        if limit is not None:
            extra += ["--limit", str(limit)]
        run_lm_eval(Path(tmp), "hf", f"pretrained={default_model()},{inputs['model_args']}",
                    *extra)
        return lm_eval_summary(Path(tmp))


register(Kind("lm_eval_hf", default_model, ("transformers", "lm_eval"), lm_eval_inputs,
              lm_eval_compute))


# --- sentence-transformers ---------------------------------------------------------------------

def st_inputs() -> dict[str, Any]:
    from tests.pooling.corpus import CORPUS

    return {"corpus": CORPUS, "batch_size": ST_BATCH_SIZE,
            "truncated": {"texts": st_truncation_texts(), "limits": list(ST_TRUNCATIONS)}}


def st_truncation_texts() -> list[str]:
    from tests.pooling.corpus import CORPUS

    return [CORPUS[15], CORPUS[55], CORPUS[-1], "short one"]


@lru_cache(maxsize=1)
def st_model():
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(embedding_model()), device="cpu")
    assert next(model.parameters()).dtype == torch.float32
    return model


def st_encode(texts: list[str], max_seq_length: int | None = None,
              batch_size: int = ST_BATCH_SIZE) -> str:
    """sentence-transformers' embeddings of `texts` as base64 little-endian float32."""
    import numpy as np

    model = st_model()
    saved = model.max_seq_length
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    try:
        ref = model.encode(texts, batch_size=batch_size, convert_to_numpy=True)
    finally:
        model.max_seq_length = saved
    return base64.b64encode(np.ascontiguousarray(ref, dtype="<f4").tobytes()).decode()


def decode_embeddings(b64: str, rows: int):
    """The (rows, dim) float64 array of an `st_encode` value."""
    import numpy as np

    flat = np.frombuffer(base64.b64decode(b64), dtype="<f4").astype(np.float64)
    return flat.reshape(rows, -1)


def st_compute(inputs: dict[str, Any]) -> dict[str, Any]:
    trunc = inputs["truncated"]
    return {
        "corpus": st_encode(inputs["corpus"], batch_size=inputs["batch_size"]),
        "truncated": {str(limit): st_encode(trunc["texts"], limit)
                      for limit in trunc["limits"]},
    }


register(Kind("st_embeddings", embedding_model, ("sentence-transformers", "transformers"),
              st_inputs, st_compute))
