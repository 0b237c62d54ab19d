//! Tool-call parsers: a model's output text, fed as it is detokenized, read into content and
//! tool calls. One streaming state machine per format (vLLM's parser names); the whole
//! (non-streamed) reading is the same machine fed once, so streamed and non-streamed calls
//! are equal by construction.
//!
//! A call's `arguments` are the JSON text the model wrote for them (for `pythonic`, its
//! keyword arguments written as JSON), sent in pieces as they arrive: the pieces of a call
//! concatenated are its whole `arguments`. A call with no arguments gets `{}`.
use super::pythonic::Pythonic;
use super::stream::{json_value_end, partial_tag, skip_ws, Machine};
pub use super::stream::{ParsedOutput, ToolEvent, ToolParser};

/// The formats, by vLLM's `--tool-call-parser` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, repeated (Hermes, Qwen).
    Hermes,
    /// `{"name": ..., "parameters": {...}}`, `; `-separated, after an optional
    /// `<|python_tag|>`, at the start of the output (Llama 3.1/3.2).
    Llama3Json,
    /// `[f(a=1), g(b="x")]`: the whole output a list of Python calls (Llama 3.2/4, Gemma).
    Pythonic,
    /// `[TOOL_CALLS]` then a JSON list of calls, or `name[ARGS]{...}` (Mistral).
    Mistral,
}

impl ToolFormat {
    pub const ALL: [ToolFormat; 4] = [
        ToolFormat::Hermes,
        ToolFormat::Llama3Json,
        ToolFormat::Pythonic,
        ToolFormat::Mistral,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Llama3Json => "llama3_json",
            ToolFormat::Pythonic => "pythonic",
            ToolFormat::Mistral => "mistral",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    pub fn parser(self) -> Box<dyn ToolParser> {
        match self {
            ToolFormat::Hermes => Box::new(Tagged::new(HERMES)),
            ToolFormat::Mistral => Box::new(Tagged::new(MISTRAL)),
            ToolFormat::Llama3Json => Box::new(Llama3Json::default()),
            ToolFormat::Pythonic => Box::new(Pythonic::default()),
        }
    }
}

/// Reads a whole output.
pub fn parse_whole(format: ToolFormat, text: &str) -> ParsedOutput {
    let mut p = format.parser();
    let mut out = ParsedOutput::default();
    out.apply(&p.push(text));
    out.apply(&p.finish());
    out
}

/// What a JSON call object (`{"name": ..., "arguments": ...}`) holds so far.
#[derive(Debug, Default)]
struct CallParts {
    name: Option<String>,
    /// The arguments' span in the text so far (to its end when not complete).
    args: Option<(usize, usize)>,
}

enum CallScan {
    Invalid,
    Partial(CallParts),
    /// With the end of the object.
    Complete(CallParts, usize),
}

/// Reads the call object at the start of `s` (which starts with `{`), as far as it goes.
/// `arg_keys`: the keys that hold the arguments; other keys are skipped.
fn scan_call(s: &str, arg_keys: &[&str]) -> CallScan {
    let b = s.as_bytes();
    let mut parts = CallParts::default();
    let mut i = skip_ws(b, 1);
    let mut first = true;
    macro_rules! need {
        ($i:expr) => {
            if $i >= b.len() {
                return CallScan::Partial(parts);
            }
        };
    }
    loop {
        need!(i);
        if b[i] == b'}' {
            return CallScan::Complete(parts, i + 1);
        }
        if !first {
            if b[i] != b',' {
                return CallScan::Invalid;
            }
            i = skip_ws(b, i + 1);
            need!(i);
        }
        if b[i] != b'"' {
            return CallScan::Invalid;
        }
        let key_end = match json_value_end(s, i) {
            Ok(Some(e)) => e,
            Ok(None) => return CallScan::Partial(parts),
            Err(()) => return CallScan::Invalid,
        };
        let Ok(key) = serde_json::from_str::<String>(&s[i..key_end]) else {
            return CallScan::Invalid;
        };
        i = skip_ws(b, key_end);
        need!(i);
        if b[i] != b':' {
            return CallScan::Invalid;
        }
        i = skip_ws(b, i + 1);
        need!(i);
        let end = match json_value_end(s, i) {
            Ok(e) => e,
            Err(()) => return CallScan::Invalid,
        };
        if arg_keys.contains(&key.as_str()) {
            parts.args = Some((i, end.unwrap_or(b.len())));
        }
        let Some(end) = end else {
            return CallScan::Partial(parts);
        };
        if key == "name" {
            match serde_json::from_str::<String>(&s[i..end]) {
                Ok(n) if !n.is_empty() => parts.name = Some(n),
                _ => return CallScan::Invalid,
            }
        }
        i = skip_ws(b, end);
        first = false;
    }
}

/// One JSON call object being read: what has been said of it so far.
#[derive(Default)]
struct JsonCall {
    /// Its index once its name is known.
    index: Option<usize>,
    /// Bytes of its arguments already sent.
    sent: usize,
}

/// What `JsonCall::advance` found.
enum Advance {
    /// More text is needed.
    More,
    /// The object ended at this offset.
    Done(usize),
    /// Not a call: nothing of it was said.
    NotACall,
    /// The text ended inside what may still have been a call, before its name: dropped.
    Cut,
    /// Broken after its name was said: the call ends here.
    Broken,
}

impl JsonCall {
    /// Reads the object at the start of `s`; `next_index`: the index a new call gets.
    fn advance(
        &mut self,
        s: &str,
        arg_keys: &[&str],
        next_index: &mut usize,
        out: &mut Vec<ToolEvent>,
        fin: bool,
    ) -> Advance {
        let (parts, end) = match scan_call(s, arg_keys) {
            CallScan::Invalid => return self.broken(out),
            CallScan::Partial(p) => (p, None),
            CallScan::Complete(p, e) => (p, Some(e)),
        };
        if self.index.is_none() {
            if let Some(name) = parts.name.clone() {
                let index = *next_index;
                *next_index += 1;
                self.index = Some(index);
                out.push(ToolEvent::Start { index, name });
            }
        }
        let Some(index) = self.index else {
            return match (end, fin) {
                (Some(_), _) => Advance::NotACall,
                (None, true) => Advance::Cut,
                (None, false) => Advance::More,
            };
        };
        if let Some((a, e)) = parts.args {
            if a + self.sent < e {
                out.push(ToolEvent::Args {
                    index,
                    text: s[a + self.sent..e].to_string(),
                });
                self.sent = e - a;
            }
        }
        match (end, fin) {
            (Some(e), _) => {
                self.close(out);
                Advance::Done(e)
            }
            (None, true) => {
                self.close(out);
                Advance::Broken
            }
            (None, false) => Advance::More,
        }
    }

    fn broken(&mut self, out: &mut Vec<ToolEvent>) -> Advance {
        match self.index {
            None => Advance::NotACall,
            Some(_) => {
                self.close(out);
                Advance::Broken
            }
        }
    }

    /// A call that said no arguments gets `{}`.
    fn close(&mut self, out: &mut Vec<ToolEvent>) {
        if let (Some(index), 0) = (self.index, self.sent) {
            out.push(ToolEvent::Args {
                index,
                text: "{}".into(),
            });
            self.sent = 2;
        }
    }
}

/// The text between calls: content, except whitespace after a call (held until other text
/// follows it, dropped if none does).
struct Between {
    after_call: bool,
}

impl Between {
    /// Says `text` as content, or holds it; returns how many bytes were said or dropped.
    fn say(&mut self, text: &str, out: &mut Vec<ToolEvent>, fin: bool) -> usize {
        if text.is_empty() {
            return 0;
        }
        if self.after_call && text.trim().is_empty() {
            return if fin { text.len() } else { 0 };
        }
        self.after_call = false;
        out.push(ToolEvent::Content(text.to_string()));
        text.len()
    }
}

/// A format whose calls follow an opening tag.
pub struct TagFormat {
    open: &'static str,
    /// Closes each call (hermes); None: calls follow the tag until the list ends (mistral).
    close: Option<&'static str>,
    arg_keys: &'static [&'static str],
}

const HERMES: TagFormat = TagFormat {
    open: "<tool_call>",
    close: Some("</tool_call>"),
    arg_keys: &["arguments", "parameters"],
};
const MISTRAL: TagFormat = TagFormat {
    open: "[TOOL_CALLS]",
    close: None,
    arg_keys: &["arguments"],
};
const MISTRAL_ARGS: &str = "[ARGS]";
const MISTRAL_CALL_ID: &str = "[CALL_ID]";

enum TagState {
    Text,
    /// After the opening tag: what it opens is not known yet.
    Opened,
    /// Inside a call object.
    Call(JsonCall),
    /// After a call: its closing tag (hermes) or the list's `,` / `]` (mistral).
    AfterCall,
    /// Mistral's JSON list: the next item or its end.
    ListItem,
    /// Mistral's `name[ARGS]{...}`: the name so far.
    Name,
    /// Mistral's `[ARGS]` value being read (its index, bytes sent).
    RawArgs(usize, usize),
    /// A broken call: text dropped up to the closing tag.
    Skip,
}

/// Hermes and Mistral: text, an opening tag, calls.
pub struct Tagged {
    f: TagFormat,
    buf: String,
    state: TagState,
    /// What the opening tag and the whitespace after it were, said as content if what
    /// follows is not a call.
    held: String,
    calls: usize,
    between: Between,
    /// Inside Mistral's JSON list of calls.
    in_list: bool,
}

impl Tagged {
    fn new(f: TagFormat) -> Self {
        Tagged {
            f,
            buf: String::new(),
            state: TagState::Text,
            held: String::new(),
            calls: 0,
            between: Between { after_call: false },
            in_list: false,
        }
    }

    fn take(&mut self, n: usize) -> String {
        self.buf.drain(..n).collect()
    }

    /// Not a call after all: the tag is content again, and the rest is read as text.
    fn not_a_call(&mut self, out: &mut Vec<ToolEvent>) {
        let held = std::mem::take(&mut self.held);
        self.between.say(&held, out, true);
        self.state = TagState::Text;
    }

    fn call_ended(&mut self) {
        self.between.after_call = true;
        self.held.clear();
    }
}

impl Machine for Tagged {
    fn held(&mut self) -> &mut String {
        &mut self.buf
    }

    fn step(&mut self, out: &mut Vec<ToolEvent>, fin: bool) -> bool {
        let b = self.buf.as_bytes();
        match &mut self.state {
            TagState::Text => {
                if let Some(k) = self.buf.find(self.f.open) {
                    let text = self.take(k);
                    let said = self.between.say(&text, out, true);
                    debug_assert_eq!(said, text.len());
                    self.held = self.take(self.f.open.len());
                    self.state = TagState::Opened;
                    return true;
                }
                let keep = if fin {
                    0
                } else {
                    partial_tag(&self.buf, self.f.open)
                };
                let text = self.buf[..self.buf.len() - keep].to_string();
                let n = self.between.say(&text, out, fin);
                self.buf.drain(..n);
                false
            }
            TagState::Opened => {
                let i = skip_ws(b, 0);
                if i == b.len() {
                    if fin {
                        self.not_a_call(out);
                        return true;
                    }
                    return false;
                }
                let c = b[i];
                let ws = self.take(i);
                self.held.push_str(&ws);
                match (c, self.f.close) {
                    (b'{', _) => self.state = TagState::Call(JsonCall::default()),
                    (b'[', None) => {
                        let bracket = self.take(1);
                        self.held.push_str(&bracket);
                        self.in_list = true;
                        self.state = TagState::ListItem;
                    }
                    (_, None) => self.state = TagState::Name,
                    (_, Some(_)) => self.not_a_call(out),
                }
                true
            }
            TagState::Call(call) => {
                match call.advance(&self.buf, self.f.arg_keys, &mut self.calls, out, fin) {
                    Advance::More => false,
                    Advance::Done(e) => {
                        self.buf.drain(..e);
                        self.call_ended();
                        self.state = TagState::AfterCall;
                        true
                    }
                    Advance::NotACall => {
                        self.not_a_call(out);
                        true
                    }
                    Advance::Broken | Advance::Cut => {
                        self.call_ended();
                        self.state = TagState::Skip;
                        true
                    }
                }
            }
            TagState::AfterCall => {
                let i = skip_ws(b, 0);
                let rest = &self.buf[i..];
                match self.f.close {
                    Some(close) if rest.starts_with(close) => {
                        self.buf.drain(..i + close.len());
                        self.state = TagState::Text;
                    }
                    Some(close) if close.starts_with(rest) && !fin => return false,
                    Some(_) => self.state = TagState::Text,
                    // Mistral, inside its JSON list: `,` and the next call, or `]`.
                    None if self.in_list => match rest.as_bytes().first() {
                        None if !fin => return false,
                        Some(b',') => {
                            self.buf.drain(..i + 1);
                            self.state = TagState::ListItem;
                        }
                        Some(b']') => {
                            self.buf.drain(..i + 1);
                            self.in_list = false;
                            self.state = TagState::Text;
                        }
                        _ => {
                            self.in_list = false;
                            self.state = TagState::Text;
                        }
                    },
                    None => self.state = TagState::Text,
                }
                true
            }
            TagState::ListItem => {
                let i = skip_ws(b, 0);
                match b.get(i) {
                    None if !fin => false,
                    Some(b'{') => {
                        let ws = self.take(i);
                        self.held.push_str(&ws);
                        self.state = TagState::Call(JsonCall::default());
                        true
                    }
                    Some(b']') => {
                        self.buf.drain(..i + 1);
                        self.in_list = false;
                        self.held.clear();
                        self.state = TagState::Text;
                        true
                    }
                    _ => {
                        self.in_list = false;
                        self.not_a_call(out);
                        true
                    }
                }
            }
            TagState::Name => {
                let (args, id) = (self.buf.find(MISTRAL_ARGS), self.buf.find(MISTRAL_CALL_ID));
                let name_end = match (args, id) {
                    (Some(a), Some(c)) => Some(a.min(c)),
                    (a, c) => a.or(c),
                };
                let name_ok = |n: &str| {
                    !n.is_empty()
                        && n.bytes()
                            .all(|c| c.is_ascii_alphanumeric() || b"_-.".contains(&c))
                };
                match (name_end, args) {
                    (Some(k), Some(a)) => {
                        let name = self.buf[..k].trim().to_string();
                        if !name_ok(&name) {
                            self.not_a_call(out);
                            return true;
                        }
                        let index = self.calls;
                        self.calls += 1;
                        out.push(ToolEvent::Start { index, name });
                        self.buf.drain(..a + MISTRAL_ARGS.len());
                        self.held.clear();
                        self.state = TagState::RawArgs(index, 0);
                        true
                    }
                    _ => {
                        // Still a name (and maybe a call id) while its characters allow it.
                        let head = &self.buf[..name_end.unwrap_or(self.buf.len())];
                        let head = &head[..head.len() - partial_tag(head, MISTRAL_ARGS)];
                        let head = &head[..head.len() - partial_tag(head, MISTRAL_CALL_ID)];
                        if fin || !(head.is_empty() || name_ok(head.trim_end())) {
                            self.not_a_call(out);
                            return true;
                        }
                        false
                    }
                }
            }
            TagState::RawArgs(index, sent) => {
                let index = *index;
                let i = skip_ws(b, 0);
                let end = if i == b.len() {
                    Ok(None)
                } else {
                    json_value_end(&self.buf, i)
                };
                let upto = match end {
                    Ok(Some(e)) => e,
                    Ok(None) => self.buf.len(),
                    Err(()) => i,
                };
                let from = if *sent == 0 { i } else { *sent };
                if from < upto {
                    out.push(ToolEvent::Args {
                        index,
                        text: self.buf[from..upto].to_string(),
                    });
                    *sent = upto;
                }
                let done = matches!(end, Ok(Some(_)) | Err(())) || fin;
                if !done {
                    return false;
                }
                let mut call = JsonCall {
                    index: Some(index),
                    sent: *sent,
                };
                call.close(out);
                self.buf.drain(..upto);
                self.call_ended();
                self.state = TagState::Text;
                true
            }
            TagState::Skip => {
                match self
                    .f
                    .close
                    .and_then(|c| self.buf.find(c).map(|k| k + c.len()))
                {
                    Some(e) => {
                        self.buf.drain(..e);
                        self.state = TagState::Text;
                        true
                    }
                    None => {
                        let keep = match (self.f.close, fin) {
                            (Some(c), false) => partial_tag(&self.buf, c),
                            _ => 0,
                        };
                        self.buf.drain(..self.buf.len() - keep);
                        false
                    }
                }
            }
        }
    }
}

/// Llama 3's JSON calls: only at the start of the output, else it is all content.
#[derive(Default)]
pub struct Llama3Json {
    buf: String,
    state: LlamaState,
    held: String,
    calls: usize,
}

#[derive(Default)]
enum LlamaState {
    /// Before the first call: whether there is one is not known yet.
    #[default]
    Start,
    Call(JsonCall),
    /// After a call: `;` and another, or the end.
    AfterCall,
    /// The rest is content.
    Content,
    /// The rest is dropped (a broken call).
    Drop,
}

const PYTHON_TAG: &str = "<|python_tag|>";

impl Machine for Llama3Json {
    fn held(&mut self) -> &mut String {
        &mut self.buf
    }

    fn step(&mut self, out: &mut Vec<ToolEvent>, fin: bool) -> bool {
        let b = self.buf.as_bytes();
        match &mut self.state {
            LlamaState::Start => {
                let mut i = skip_ws(b, 0);
                let rest = &self.buf[i..];
                if rest.starts_with(PYTHON_TAG) {
                    i = skip_ws(b, i + PYTHON_TAG.len());
                } else if !fin && PYTHON_TAG.starts_with(rest) {
                    return false;
                }
                if i == b.len() && !fin {
                    return false;
                }
                if b.get(i) == Some(&b'{') {
                    self.held = self.buf.drain(..i).collect();
                    self.state = LlamaState::Call(JsonCall::default());
                } else {
                    self.state = LlamaState::Content;
                }
                true
            }
            LlamaState::Call(call) => {
                match call.advance(
                    &self.buf,
                    &["parameters", "arguments"],
                    &mut self.calls,
                    out,
                    fin,
                ) {
                    Advance::More => false,
                    Advance::Done(e) => {
                        self.buf.drain(..e);
                        self.held.clear();
                        self.state = LlamaState::AfterCall;
                        true
                    }
                    // Cut before a first call: a JSON answer, not a call.
                    Advance::Cut if self.calls > 0 => {
                        self.state = LlamaState::Drop;
                        true
                    }
                    Advance::NotACall | Advance::Cut => {
                        // Said as it came (the calls before it, if any, stand).
                        let held = std::mem::take(&mut self.held);
                        self.buf.insert_str(0, &held);
                        self.state = LlamaState::Content;
                        true
                    }
                    Advance::Broken => {
                        self.state = LlamaState::Drop;
                        true
                    }
                }
            }
            LlamaState::AfterCall => {
                let i = skip_ws(b, 0);
                match b.get(i) {
                    None if fin => {
                        self.buf.clear();
                        false
                    }
                    None => false,
                    Some(b';') => {
                        let j = skip_ws(b, i + 1);
                        match b.get(j) {
                            Some(b'{') => {
                                self.held = self.buf.drain(..j).collect();
                                self.state = LlamaState::Call(JsonCall::default());
                                true
                            }
                            None if !fin => false,
                            _ => {
                                self.state = LlamaState::Content;
                                true
                            }
                        }
                    }
                    Some(_) => {
                        self.buf.drain(..i);
                        self.state = LlamaState::Content;
                        true
                    }
                }
            }
            LlamaState::Content => {
                if !self.buf.is_empty() {
                    out.push(ToolEvent::Content(std::mem::take(&mut self.buf)));
                }
                false
            }
            LlamaState::Drop => {
                self.buf.clear();
                false
            }
        }
    }
}
