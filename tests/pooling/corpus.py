"""Sentences for the embedding parity tests: short, long and over the 256-token limit,
unicode, code, numbers, repeated words, odd spacing and punctuation."""

from __future__ import annotations

_LONG_PARAGRAPH = (
    "The history of computing is longer than the history of computing hardware and modern "
    "computing technology and includes the history of methods intended for pen and paper or "
    "for chalk and slate, with or without the aid of tables. Digital computing is intimately "
    "tied to the representation of numbers. "
)

CORPUS: list[str] = [
    # short
    "hello",
    "Hello world!",
    "A",
    "ok",
    "?",
    "The cat sat on the mat.",
    "Embeddings map text to vectors.",
    "I love Paris in the springtime.",
    "What is the capital of France?",
    "Paris is the capital of France.",
    "Berlin is the capital of Germany.",
    "The quick brown fox jumps over the lazy dog.",
    "How do I reset my password?",
    "Click 'Forgot password' on the sign-in page.",
    "It's raining cats and dogs, isn't it?",
    # medium
    "Sentence embeddings are dense vector representations of sentences that capture their "
    "meaning, so that similar sentences end up close to each other in the vector space.",
    "The mitochondria is the powerhouse of the cell, producing most of the chemical energy "
    "needed to power the cell's biochemical reactions.",
    "In 1969, Neil Armstrong and Buzz Aldrin landed on the Moon while Michael Collins "
    "orbited above in the command module Columbia.",
    "Machine learning models can be evaluated with cross-validation, held-out test sets, "
    "or bootstrapping, depending on how much data is available.",
    "She sells sea shells by the sea shore; the shells she sells are surely sea shells.",
    "Please find attached the quarterly report for Q3 2024, including revenue (+12.5%), "
    "costs (-3.1%) and head-count figures.",
    "The train leaves at 7:45 a.m. from platform 9¾ and arrives at 11:02.",
    # unicode
    "Café, naïve, façade, jalapeño, déjà vu, crème brûlée.",
    "Straße, Größe, Übermut und Äpfel.",
    "東京は日本の首都です。",
    "北京欢迎你，上海也欢迎你。",
    "서울은 한국의 수도입니다.",
    "Москва — столица России.",
    "Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "القاهرة هي عاصمة مصر.",
    "ירושלים היא עיר עתיקה.",
    "नई दिल्ली भारत की राजधानी है।",
    "I ❤️ emoji 😀🎉🚀 and symbols ™ © ® ∑ ∞ ≠ ≤.",
    "Zero-width\u200bjoiner and non\u00a0breaking space.",
    "Ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ ａｎｄ １２３",
    # code
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;",
    "const add = (a, b) => a + b; console.log(add(2, 3));",
    "git commit -m \"fix: handle empty input\" && git push origin main",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "<html><body><h1>Title</h1><p class=\"x\">Text &amp; more</p></body></html>",
    "fn main() { println!(\"{}\", vec![1, 2, 3].iter().sum::<i32>()); }",
    # numbers, punctuation, spacing
    "3.14159 2.71828 1.41421 1.61803 0.57721",
    "+1 (555) 123-4567, ext. 89; e-mail: someone@example.com",
    "https://example.com/path/to/page?query=embeddings&lang=en#section-2",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\n\nmixed   together",
    "!!!??? ... --- *** ### @@@",
    "UPPER CASE SENTENCE WITH SHOUTING",
    # repeated words
    "buffalo buffalo buffalo buffalo buffalo buffalo buffalo buffalo",
    "the " * 40,
    "na " * 16 + "batman",
    "very " * 120 + "long",  # 122 words: fits
    # long and truncated (over 256 tokens)
    _LONG_PARAGRAPH * 2,
    _LONG_PARAGRAPH * 5,
    "word " * 600,
    " ".join(f"item{i}" for i in range(300)),
    "日本語の文章はとても長くなることがあります。" * 30,
]
