//! What every tool-call parser shares: the events it reads from the text, the streaming
//! interface, a whole output's reading, and the small scanners of JSON and tags.
use serde::de::IgnoredAny;

/// What the parser read from the text so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    /// Text that is not part of a call.
    Content(String),
    /// A call begins: its place among the turn's calls, and the function's name.
    Start { index: usize, name: String },
    /// The next piece of a call's arguments (JSON text).
    Args { index: usize, text: String },
}

/// A streaming parser: `push` each piece of text, then `finish` once at the end.
pub trait ToolParser: Send + Sync {
    fn push(&mut self, text: &str) -> Vec<ToolEvent>;
    fn finish(&mut self) -> Vec<ToolEvent>;
}

/// A parser written as moves over the text it holds: `step` makes one, false when it needs
/// more text (`fin`: there is no more).
pub trait Machine: Send + Sync {
    fn held(&mut self) -> &mut String;
    fn step(&mut self, out: &mut Vec<ToolEvent>, fin: bool) -> bool;
}

impl<M: Machine> ToolParser for M {
    fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.held().push_str(text);
        let mut out = vec![];
        while self.step(&mut out, false) {}
        out
    }

    fn finish(&mut self) -> Vec<ToolEvent> {
        let mut out = vec![];
        while self.step(&mut out, true) {}
        out
    }
}

/// A whole output read: its content and its calls (name, arguments).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ParsedOutput {
    pub content: String,
    pub calls: Vec<(String, String)>,
}

impl ParsedOutput {
    pub fn apply(&mut self, events: &[ToolEvent]) {
        for e in events {
            match e {
                ToolEvent::Content(t) => self.content.push_str(t),
                ToolEvent::Start { name, .. } => self.calls.push((name.clone(), String::new())),
                ToolEvent::Args { index, text } => self.calls[*index].1.push_str(text),
            }
        }
    }
}

pub(crate) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The end of the JSON value that starts at `s[i]`: Ok(None) while it is not complete,
/// Err when it is not JSON.
pub(crate) fn json_value_end(s: &str, i: usize) -> Result<Option<usize>, ()> {
    let mut values = serde_json::Deserializer::from_str(&s[i..]).into_iter::<IgnoredAny>();
    match values.next() {
        Some(Ok(_)) => Ok(Some(i + values.byte_offset())),
        None => Ok(None),
        Some(Err(e)) if e.is_eof() || at_end(&s[i..], &e) => Ok(None),
        Some(Err(_)) => Err(()),
    }
}

/// Whether a JSON error is at the very end of the text: a number cut short (`1.`, `-`, `2e`)
/// is refused there as invalid, not as cut short.
fn at_end(s: &str, e: &serde_json::Error) -> bool {
    let lines = s.split('\n').count();
    let last = s.rsplit('\n').next().unwrap_or("");
    e.line() == lines && e.column() >= last.len()
}

/// How much of `s`'s end could be the start of `tag` (held back: it may be the tag).
pub(crate) fn partial_tag(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.is_char_boundary(s.len() - k) && tag.starts_with(&s[s.len() - k..]))
        .unwrap_or(0)
}
