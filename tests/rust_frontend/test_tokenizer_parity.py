"""Rust tokenization and incremental detokenization against Python `tokenizers`."""

import pytest

CORPUS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "fn main() { println!(\"{}\", vec![1, 2, 3].iter().sum::<i32>()); }",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji: 😀👍🏽🇫🇷 family 👨‍👩‍👧‍👦 and ✨sparkles✨",
    "   leading and trailing   \n\n\t\ttabs\r\n  multiple   spaces    ",
    "Mixed: café naïve résumé Ω≈ç√∫ — “quotes” ‘single’ … ½",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "",
    "a" * 300 + " " + "ab" * 50,
    "0123456789 3.14159 -42 1e10 0x1F #!@$%^&*()_+{}|:<>?",
]


@pytest.fixture(scope="module")
def py_tok(model_dir):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


@pytest.mark.parametrize("add_special", [False, True])
def test_tokenize_matches_python(run_text, model_dir, py_tok, add_special):
    args = ["tokenize", "--tokenizer", str(model_dir / "tokenizer.json")]
    if add_special:
        args.append("--add-special-tokens")
    rc, out, err = run_text(args, CORPUS)
    assert rc == 0, err
    expected = [py_tok.encode(t, add_special_tokens=add_special).ids for t in CORPUS]
    for text, got, want in zip(CORPUS, out, expected):
        assert got == want, text


@pytest.mark.parametrize("keep_special", [False, True])
def test_incremental_detokenization(run_text, model_dir, py_tok, keep_special):
    ids = [py_tok.encode(t, add_special_tokens=False).ids for t in CORPUS]
    # Also a sequence built from single-byte-level pieces of a multi-byte character stream.
    ids.append(py_tok.encode("🇫🇷😀中文", add_special_tokens=False).ids * 3)
    args = ["decode-prefixes", "--tokenizer", str(model_dir / "tokenizer.json")]
    if keep_special:
        args += ["--keep-special-tokens", "--no-spaces-between-special-tokens"]
    rc, out, err = run_text(args, ids)
    assert rc == 0, err
    for seq, res in zip(ids, out):
        want = py_tok.decode(seq, skip_special_tokens=not keep_special)
        for d in res["deltas"]:
            assert "\ufffd" not in d, (seq, res["deltas"])
        assert "".join(res["deltas"]) + res["tail"] == want
        assert res["tail"] == ""
        assert res["full"] == want


def test_sequence_cut_mid_character_never_emits_replacement_char(run_text, model_dir, py_tok):
    # A generation can stop (max_tokens) between the byte-level tokens of one character.
    full = py_tok.encode("猫😀🇫🇷", add_special_tokens=False).ids
    cuts = [full[:i] for i in range(1, len(full))]
    cuts = [c for c in cuts if py_tok.decode(c).endswith("\ufffd")]
    assert cuts, "expected at least one cut inside a character"
    tokenizer = str(model_dir / "tokenizer.json")
    rc, out, err = run_text(["decode-prefixes", "--tokenizer", tokenizer], cuts)
    assert rc == 0, err
    for ids, res in zip(cuts, out):
        text = "".join(res["deltas"]) + res["tail"]
        assert "\ufffd" not in text
        assert text == py_tok.decode(ids).rstrip("\ufffd")
