//! `--reasoning-parser`: a reply's reasoning, the `<think>…</think>` span, read apart from
//! its content. One state machine reads a reply whole or piece by piece, so a streamed reply
//! splits exactly as the same reply not streamed.
use llguidance::api::{GrammarWithLexer, TopLevelGrammar};

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// The formats, by vLLM's `--reasoning-parser` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// DeepSeek R1: a reply is reasoning until `</think>` (its template may open the span in
    /// the prompt, so a reply without `</think>` is all reasoning).
    DeepSeekR1,
    /// Qwen3: a reply reasons when it opens with `<think>`, or when the prompt ends inside an
    /// open span (the thinking-only templates put `<think>` in the prompt); else it is all
    /// content (`enable_thinking: false` closes the span in the prompt).
    Qwen3,
}

impl ReasoningFormat {
    pub const NAMES: [&'static str; 2] = ["deepseek_r1", "qwen3"];

    pub fn from_name(name: &str) -> anyhow::Result<Self> {
        match name {
            "deepseek_r1" => Ok(Self::DeepSeekR1),
            "qwen3" => Ok(Self::Qwen3),
            _ => anyhow::bail!(
                "--reasoning-parser {name:?} is not one of this server's parsers: {}",
                Self::NAMES.join(", ")
            ),
        }
    }

    /// How a reply to `prompt` (the rendered prompt's text) begins.
    pub fn start(self, prompt: &str) -> ReplyStart {
        let prompt = prompt.trim_end();
        if prompt.ends_with(CLOSE) {
            return ReplyStart::Closed; // a template's "no thinking" (an empty span)
        }
        match (self, prompt.ends_with(OPEN)) {
            (Self::DeepSeekR1, _) | (Self::Qwen3, true) => ReplyStart::Reasoning,
            (Self::Qwen3, false) => ReplyStart::Content,
        }
    }
}

/// Where a reply starts: inside its reasoning; in content, where a leading `<think>` opens
/// the span; or after a span the prompt closed, all content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyStart {
    Reasoning,
    Content,
    Closed,
}

impl ReplyStart {
    /// `inner` (a constraint's grammar) behind a free reasoning span: structured outputs and
    /// forced tool calls apply to the content after `</think>`, as vLLM's do.
    pub fn wrap_grammar(self, mut inner: TopLevelGrammar) -> TopLevelGrammar {
        // A list's members may name each other by index; prepend nothing to those.
        if inner.grammars.len() != 1 {
            return inner;
        }
        inner.grammars[0].name = Some("content".into());
        let start = match self {
            ReplyStart::Reasoning => "start: reasoning SPACE? @content",
            ReplyStart::Content => "start: (\"<think>\" reasoning SPACE?)? @content",
            ReplyStart::Closed => return inner,
        };
        // The span is lazy: it ends at the first `</think>`, which models follow with blank
        // lines.
        let lark =
            format!("{start}\nreasoning[suffix=\"</think>\"]: /(?s:.*)/\nSPACE: /[ \\t\\r\\n]+/");
        let mut grammars = vec![GrammarWithLexer::from_lark(lark)];
        grammars.append(&mut inner.grammars);
        TopLevelGrammar {
            grammars,
            max_tokens: inner.max_tokens,
        }
    }
}

/// What a piece of a reply holds: its reasoning and its content text.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the first text: a leading `<think>` (after any whitespace) opens the span.
    Opening(ReplyStart),
    Reasoning,
    Content,
}

/// A reply's reader: fed its text in pieces, it says what each piece adds to the reasoning and
/// to the content; text that may begin a tag is held back until the tag is known.
pub struct ReasoningReader {
    state: State,
    held: String,
    /// The span was entered (the reply has a reasoning field, if empty).
    reasoned: bool,
}

impl ReasoningReader {
    pub fn new(start: ReplyStart) -> Self {
        ReasoningReader {
            state: match start {
                ReplyStart::Closed => State::Content,
                _ => State::Opening(start),
            },
            held: String::new(),
            reasoned: false,
        }
    }

    /// Whether the reply has entered its reasoning span so far.
    pub fn reasoned(&self) -> bool {
        self.reasoned
    }

    pub fn push(&mut self, text: &str) -> Split {
        let mut out = Split::default();
        self.held.push_str(text);
        loop {
            match self.state {
                State::Opening(start) => {
                    let body = self.held.trim_start();
                    if let Some(rest) = body.strip_prefix(OPEN) {
                        self.held = rest.to_string();
                        self.enter_reasoning();
                    } else if OPEN.starts_with(body) {
                        return out; // whitespace or a part of `<think>`: wait
                    } else if start == ReplyStart::Reasoning {
                        self.enter_reasoning();
                    } else {
                        self.state = State::Content;
                    }
                }
                State::Reasoning => {
                    if let Some(i) = self.held.find(CLOSE) {
                        out.reasoning.push_str(&self.held[..i]);
                        self.held.drain(..i + CLOSE.len());
                        self.state = State::Content;
                        continue;
                    }
                    let keep = partial_suffix(&self.held, CLOSE);
                    let cut = self.held.len() - keep;
                    out.reasoning.push_str(&self.held[..cut]);
                    self.held.drain(..cut);
                    return out;
                }
                State::Content => {
                    out.content.push_str(&self.held);
                    self.held.clear();
                    return out;
                }
            }
        }
    }

    /// The end of the reply: what was held back is what it looked like.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        let mut out = Split::default();
        match self.state {
            State::Opening(ReplyStart::Reasoning) => {
                self.enter_reasoning();
                out.reasoning = held;
            }
            State::Reasoning => out.reasoning = held,
            State::Opening(_) | State::Content => out.content = held,
        }
        out
    }

    fn enter_reasoning(&mut self) {
        self.state = State::Reasoning;
        self.reasoned = true;
    }
}

/// The longest end of `text` that begins `tag` (and is not all of it).
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// A whole reply: its reasoning (None when it has no reasoning span) and its content.
pub fn split_whole(start: ReplyStart, text: &str) -> (Option<String>, String) {
    let mut r = ReasoningReader::new(start);
    let mut a = r.push(text);
    let b = r.finish();
    a.reasoning.push_str(&b.reasoning);
    a.content.push_str(&b.content);
    (r.reasoned().then_some(a.reasoning), a.content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReplyStart::{Closed, Content, Reasoning};

    fn whole(start: ReplyStart, text: &str) -> (Option<&'static str>, &'static str) {
        let (r, c) = split_whole(start, text);
        (r.map(|s| &*s.leak()), &*c.leak())
    }

    #[test]
    fn whole_replies_split_as_vllm_does() {
        assert_eq!(whole(Reasoning, "<think>a b</think>c"), (Some("a b"), "c"));
        assert_eq!(whole(Reasoning, "a b</think>\n\nc"), (Some("a b"), "\n\nc"));
        // Never closed: all reasoning (DeepSeek R1), or all content when it never opened.
        assert_eq!(whole(Reasoning, "a <thi"), (Some("a <thi"), ""));
        assert_eq!(whole(Reasoning, "a </thi"), (Some("a </thi"), ""));
        assert_eq!(whole(Content, "a </think> b"), (None, "a </think> b"));
        assert_eq!(
            whole(Content, "\n<think>\nx\n</think>\n\ny"),
            (Some("\nx\n"), "\n\ny")
        );
        assert_eq!(whole(Content, "<think></think>"), (Some(""), ""));
        // A second span is content.
        assert_eq!(
            whole(Reasoning, "x</think>y<think>z</think>"),
            (Some("x"), "y<think>z</think>")
        );
        assert_eq!(whole(Content, "  "), (None, "  "));
        assert_eq!(whole(Reasoning, ""), (Some(""), ""));
        assert_eq!(whole(Content, "<thi"), (None, "<thi"));
        assert_eq!(
            whole(Closed, "<think>x</think>y"),
            (None, "<think>x</think>y")
        );
    }

    #[test]
    fn every_split_reads_as_the_whole() {
        let texts = [
            "<think>r1 é</think>content 😀</think>",
            "  <think>\nplan</think>\n\n{\"a\": 1}",
            "thinking é without end </thin",
            "no span at all <think> here",
            "<think>",
            "</think>only",
        ];
        for start in [Reasoning, Content, Closed] {
            for text in texts {
                let expected = split_whole(start, text);
                let bounds: Vec<usize> = (0..=text.len())
                    .filter(|&i| text.is_char_boundary(i))
                    .collect();
                // Every split into two pieces, and one character at a time.
                let mut cuts: Vec<Vec<usize>> = bounds.iter().map(|&i| vec![i]).collect();
                cuts.push(bounds.clone());
                for cut in cuts {
                    let mut r = ReasoningReader::new(start);
                    let (mut reasoning, mut content, mut at) = (String::new(), String::new(), 0);
                    for &i in cut.iter().chain([text.len()].iter()) {
                        let s = r.push(&text[at..i]);
                        at = i;
                        reasoning.push_str(&s.reasoning);
                        content.push_str(&s.content);
                    }
                    let s = r.finish();
                    reasoning.push_str(&s.reasoning);
                    content.push_str(&s.content);
                    let got = (r.reasoned().then_some(reasoning), content);
                    assert_eq!(got, expected, "{start:?} {text:?} cut at {cut:?}");
                }
            }
        }
    }

    #[test]
    fn a_partial_tag_is_held_back_until_known() {
        let mut r = ReasoningReader::new(Reasoning);
        assert_eq!(r.push("<thi"), Split::default());
        assert_eq!(r.push("nk>plan </th").reasoning, "plan ");
        let s = r.push("ink>ok");
        assert_eq!((s.reasoning.as_str(), s.content.as_str()), ("", "ok"));
    }

    #[test]
    fn the_prompt_says_where_a_reply_starts() {
        let q = ReasoningFormat::Qwen3;
        assert_eq!(q.start("<|im_start|>assistant\n<think>\n"), Reasoning);
        assert_eq!(q.start("<|im_start|>assistant\n"), Content);
        assert_eq!(q.start("assistant\n<think>\n\n</think>\n\n"), Closed);
        assert_eq!(
            ReasoningFormat::DeepSeekR1.start("<think>\n\n</think>"),
            Closed
        );
        assert_eq!(q.start("<think> x"), Content);
        assert_eq!(ReasoningFormat::DeepSeekR1.start("anything"), Reasoning);
        assert!(ReasoningFormat::from_name("granite").is_err());
    }
}
