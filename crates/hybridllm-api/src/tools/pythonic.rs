//! The `pythonic` tool-call format: the whole output is a Python list of calls with keyword
//! arguments, `[get_weather(city="Paris", days=3), now()]` (Llama 3.2/4, Gemma 3). Each
//! call's keyword arguments become a JSON object, written as Python's `json.dumps` writes it
//! (what vLLM returns); argument values are Python literals (JSON's `true`, `false` and
//! `null` are read too). Anything else is content.
use super::stream::{skip_ws, Machine, ToolEvent};
use serde::Serialize;
use serde_json::{Map, Number, Value};

/// The deepest a literal may nest.
const MAX_DEPTH: usize = 64;
const PYTHON_START: &str = "<|python_start|>";

#[derive(Default)]
pub struct Pythonic {
    buf: String,
    state: State,
    /// Where the list starts in `buf`.
    list_at: usize,
    /// Per call: keyword arguments sent, and whether its closing brace was.
    sent: Vec<(usize, bool)>,
}

#[derive(Default, PartialEq, Eq)]
enum State {
    /// Whether the output is a list of calls is not known yet.
    #[default]
    Start,
    List,
    Content,
    /// After the list (or a broken call): the rest is dropped.
    Done,
}

/// A call read so far.
#[derive(Debug)]
struct PyCall {
    name: String,
    kwargs: Vec<(String, Value)>,
    closed: bool,
}

/// Why reading stopped.
#[derive(Debug, PartialEq)]
enum Stop {
    /// The text ends before the construct does.
    More,
    /// Not this format.
    Bad,
}

struct Reader<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
}

type Read<T> = Result<T, Stop>;

impl Reader<'_> {
    fn ws(&mut self) {
        self.i = skip_ws(self.b, self.i);
    }

    fn peek(&self) -> Read<u8> {
        self.b.get(self.i).copied().ok_or(Stop::More)
    }

    fn expect(&mut self, c: u8) -> Read<()> {
        self.ws();
        match self.peek()? == c {
            true => {
                self.i += 1;
                Ok(())
            }
            false => Err(Stop::Bad),
        }
    }

    /// A name: `[A-Za-z_][A-Za-z0-9_]*` (with `.` and `-` for function names).
    fn ident(&mut self, dotted: bool) -> Read<String> {
        self.ws();
        let start = self.i;
        let first = self.peek()?;
        if !(first.is_ascii_alphabetic() || first == b'_') {
            return Err(Stop::Bad);
        }
        loop {
            match self.b.get(self.i) {
                None => return Err(Stop::More),
                Some(c) if c.is_ascii_alphanumeric() || *c == b'_' => self.i += 1,
                Some(b'.' | b'-') if dotted => self.i += 1,
                Some(_) => return Ok(self.s[start..self.i].to_string()),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Read<Value> {
        if depth > MAX_DEPTH {
            return Err(Stop::Bad);
        }
        self.ws();
        match self.peek()? {
            q @ (b'"' | b'\'') => self.string(q).map(Value::String),
            b'-' | b'+' | b'0'..=b'9' | b'.' => self.number(),
            open @ (b'[' | b'(') => {
                self.i += 1;
                let close = if open == b'[' { b']' } else { b')' };
                let mut items = vec![];
                loop {
                    self.ws();
                    if self.peek()? == close {
                        self.i += 1;
                        return Ok(Value::Array(items));
                    }
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        c if c == close => {}
                        _ => return Err(Stop::Bad),
                    }
                }
            }
            b'{' => {
                self.i += 1;
                let mut map = Map::new();
                loop {
                    self.ws();
                    if self.peek()? == b'}' {
                        self.i += 1;
                        return Ok(Value::Object(map));
                    }
                    let key = match self.value(depth + 1)? {
                        Value::String(k) => k,
                        Value::Number(n) => n.to_string(),
                        _ => return Err(Stop::Bad),
                    };
                    self.expect(b':')?;
                    let v = self.value(depth + 1)?;
                    map.insert(key, v);
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        b'}' => {}
                        _ => return Err(Stop::Bad),
                    }
                }
            }
            _ => match self.ident(false)?.as_str() {
                "True" | "true" => Ok(Value::Bool(true)),
                "False" | "false" => Ok(Value::Bool(false)),
                "None" | "null" => Ok(Value::Null),
                _ => Err(Stop::Bad),
            },
        }
    }

    fn string(&mut self, quote: u8) -> Read<String> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let start = self.i;
            while self.i < self.b.len() && self.b[self.i] != quote && self.b[self.i] != b'\\' {
                self.i += 1;
            }
            out.push_str(&self.s[start..self.i]);
            match self.peek()? {
                c if c == quote => {
                    self.i += 1;
                    return Ok(out);
                }
                _ => {
                    let esc = *self.b.get(self.i + 1).ok_or(Stop::More)?;
                    self.i += 2;
                    let hex = |r: &mut Self, n: usize| -> Read<u32> {
                        let h = r.s.get(r.i..r.i + n).ok_or(Stop::More)?;
                        r.i += n;
                        u32::from_str_radix(h, 16).map_err(|_| Stop::Bad)
                    };
                    match esc {
                        b'n' => out.push('\n'),
                        b't' => out.push('\t'),
                        b'r' => out.push('\r'),
                        b'0' => out.push('\0'),
                        b'\\' | b'\'' | b'"' => out.push(esc as char),
                        b'x' => out.push(char::from_u32(hex(self, 2)?).ok_or(Stop::Bad)?),
                        b'u' => out.push(char::from_u32(hex(self, 4)?).ok_or(Stop::Bad)?),
                        // Python keeps an unknown escape as written.
                        _ => {
                            self.i -= 1;
                            out.push('\\');
                        }
                    }
                }
            }
        }
    }

    fn number(&mut self) -> Read<Value> {
        let start = self.i;
        while self.i < self.b.len() && b"+-.0123456789eE_".contains(&self.b[self.i]) {
            self.i += 1;
        }
        if self.i == self.b.len() {
            return Err(Stop::More);
        }
        let text: String = self.s[start..self.i]
            .chars()
            .filter(|c| *c != '_')
            .collect();
        let text = text.strip_prefix('+').unwrap_or(&text);
        if let Ok(n) = text.parse::<i64>() {
            return Ok(Value::Number(n.into()));
        }
        text.parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or(Stop::Bad)
    }

    /// `name(k=v, ...)`, recorded in `calls` as far as it goes.
    fn call(&mut self, calls: &mut Vec<PyCall>) -> Read<()> {
        let name = self.ident(true)?;
        self.expect(b'(')?;
        calls.push(PyCall {
            name,
            kwargs: vec![],
            closed: false,
        });
        loop {
            self.ws();
            if self.peek()? == b')' {
                self.i += 1;
                calls.last_mut().expect("pushed").closed = true;
                return Ok(());
            }
            let key = self.ident(false)?;
            self.expect(b'=')?;
            let v = self.value(0)?;
            // Complete only once what follows it is seen (a number may go on).
            self.ws();
            let next = self.peek()?;
            calls.last_mut().expect("pushed").kwargs.push((key, v));
            match next {
                b',' => self.i += 1,
                b')' => {}
                _ => return Err(Stop::Bad),
            }
        }
    }

    /// `[call, call, ...]`: the offset after it.
    fn list(&mut self, calls: &mut Vec<PyCall>) -> Read<usize> {
        self.expect(b'[')?;
        loop {
            self.call(calls)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => return Ok(self.i + 1),
                _ => return Err(Stop::Bad),
            }
        }
    }
}

/// Python's `json.dumps` spacing: `", "` between items, `": "` after keys.
struct PySpacing;

impl serde_json::ser::Formatter for PySpacing {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.begin_array_value(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// A value as Python's `json.dumps(v, ensure_ascii=False)` writes it.
pub fn py_json(v: &Value) -> String {
    let mut out = vec![];
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PySpacing);
    v.serialize(&mut ser).expect("a JSON value serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

impl Pythonic {
    /// What of `calls` has not been said yet.
    fn say(&mut self, calls: &[PyCall], out: &mut Vec<ToolEvent>) {
        for (index, c) in calls.iter().enumerate() {
            if index == self.sent.len() {
                out.push(ToolEvent::Start {
                    index,
                    name: c.name.clone(),
                });
                self.sent.push((0, false));
            }
            let (kwargs, closed) = &mut self.sent[index];
            let mut text = String::new();
            for (k, (key, v)) in c.kwargs.iter().enumerate().skip(*kwargs) {
                text.push_str(if k == 0 { "{" } else { ", " });
                text.push_str(&py_json(&Value::String(key.clone())));
                text.push_str(": ");
                text.push_str(&py_json(v));
            }
            *kwargs = c.kwargs.len();
            if c.closed && !*closed {
                text.push_str(if c.kwargs.is_empty() { "{}" } else { "}" });
                *closed = true;
            }
            if !text.is_empty() {
                out.push(ToolEvent::Args { index, text });
            }
        }
    }
}

impl Machine for Pythonic {
    fn held(&mut self) -> &mut String {
        &mut self.buf
    }

    fn step(&mut self, out: &mut Vec<ToolEvent>, fin: bool) -> bool {
        let b = self.buf.as_bytes();
        match self.state {
            State::Start => {
                let mut i = skip_ws(b, 0);
                let rest = &self.buf[i..];
                if rest.starts_with(PYTHON_START) {
                    i = skip_ws(b, i + PYTHON_START.len());
                } else if !fin && !rest.is_empty() && PYTHON_START.starts_with(rest) {
                    return false;
                }
                match b.get(i) {
                    None if !fin => return false,
                    Some(b'[') => {
                        self.list_at = i;
                        self.state = State::List;
                    }
                    _ => self.state = State::Content,
                }
                true
            }
            State::List => {
                let mut r = Reader {
                    b,
                    s: &self.buf,
                    i: self.list_at,
                };
                let mut calls = vec![];
                let read = r.list(&mut calls);
                if calls.is_empty() {
                    return match read {
                        Err(Stop::More) if !fin => false,
                        _ => {
                            self.state = State::Content;
                            true
                        }
                    };
                }
                self.say(&calls, out);
                if read == Err(Stop::More) && !fin {
                    return false;
                }
                if let Some(last) = calls.last() {
                    let index = calls.len() - 1;
                    if !last.closed {
                        let text = if self.sent[index].0 == 0 { "{}" } else { "}" };
                        out.push(ToolEvent::Args {
                            index,
                            text: text.into(),
                        });
                    }
                }
                self.state = State::Done;
                true
            }
            State::Content => {
                if !self.buf.is_empty() {
                    out.push(ToolEvent::Content(std::mem::take(&mut self.buf)));
                }
                false
            }
            State::Done => {
                self.buf.clear();
                false
            }
        }
    }
}
