//! `tool_choice` `required` or a named tool, enforced: a grammar (llguidance's Lark dialect)
//! that allows only the parser's own format, around calls whose `name` is one of the
//! allowed tools and whose arguments follow that tool's `parameters` schema. The output is
//! then read by the same parser as free output.
use super::definitions::FunctionTool;
use super::parsers::ToolFormat;
use crate::structured::close_objects;
use serde_json::{json, Value};
use std::borrow::Cow;

/// A schema as a Lark `%json` body: compact JSON, no free whitespace (a small model that may
/// put whitespace anywhere can loop on it until `max_tokens`).
fn json_rule(mut schema: Value) -> String {
    if let Value::Object(m) = &mut schema {
        m.entry("x-guidance")
            .or_insert_with(|| json!({"whitespace_flexible": false}));
    }
    format!("%json {schema}")
}

/// A tool's parameters as enforced: objects hold the properties they declare unless they
/// say otherwise (as OpenAI's strict mode; an open object lets a small model add keys until
/// `max_tokens`).
fn closed(parameters: &Value) -> Value {
    let mut p = parameters.clone();
    close_objects(&mut p);
    p
}

/// The schema of one call object: `{"name": <the tool>, <args_key>: <its parameters>}`.
fn call_schema(tool: &FunctionTool, args_key: &str) -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"const": tool.name}, args_key: closed(&tool.parameters)},
        "required": ["name", args_key],
        "additionalProperties": false,
    })
}

/// A Lark string literal.
fn lit(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Python keyword arguments for a `pythonic` call: every property of the schema, in its
/// order, each value a JSON literal of its schema (JSON strings and numbers are Python's).
fn pythonic_call(tool: &FunctionTool) -> String {
    let props = tool.parameters.get("properties").and_then(Value::as_object);
    let args: Vec<String> = props
        .into_iter()
        .flatten()
        .map(|(k, schema)| format!("{} {}", lit(&format!("{k}=")), json_rule(closed(schema))))
        .collect();
    let mut parts = vec![lit(&format!("{}(", tool.name))];
    parts.extend(args.into_iter().enumerate().map(|(i, a)| match i {
        0 => a,
        _ => format!("\", \" {a}"),
    }));
    parts.push(lit(")"));
    parts.join(" ")
}

/// A call's object with any arguments: how a tool without `strict` is called under `auto`.
fn loose(tool: &FunctionTool) -> FunctionTool {
    FunctionTool {
        parameters: json!({"type": "object", "additionalProperties": true}),
        ..tool.clone()
    }
}

/// The pieces of `format`'s calls: one rule per tool (`tool_<i>`) and, for Hermes, the call
/// after its opening tag (`body`); then how one call, the separator between calls, and the
/// whole list's opening and closing are written.
struct Calls {
    rules: Vec<String>,
    call: &'static str,
    sep: &'static str,
    open: &'static str,
    close: &'static str,
}

fn calls(format: ToolFormat, tools: &[&FunctionTool]) -> Calls {
    let mut rules = vec![];
    let names: Vec<String> = (0..tools.len()).map(|i| format!("tool_{i}")).collect();
    rules.push(format!("one: {}", names.join(" | ")));
    for (i, t) in tools.iter().enumerate() {
        let body = match format {
            ToolFormat::Hermes | ToolFormat::Mistral => json_rule(call_schema(t, "arguments")),
            ToolFormat::Llama3Json => json_rule(call_schema(t, "parameters")),
            ToolFormat::Pythonic => pythonic_call(t),
        };
        rules.push(format!("tool_{i}: {body}"));
    }
    let (call, sep, open, close) = match format {
        ToolFormat::Hermes => {
            rules.push("body: \"\\n\" one \"\\n</tool_call>\"".to_string());
            ("\"<tool_call>\" body", "\"\\n\"", "", "")
        }
        ToolFormat::Llama3Json => ("one", "\"; \"", "", ""),
        ToolFormat::Pythonic => ("one", "\", \"", "\"[\"", "\"]\""),
        ToolFormat::Mistral => ("one", "\", \"", "\"[TOOL_CALLS][\"", "\"]\""),
    };
    Calls {
        rules,
        call,
        sep,
        open,
        close,
    }
}

impl Calls {
    /// One call, or several.
    fn list(&self, parallel: bool) -> String {
        match parallel {
            true => format!("call ({} call)*", self.sep),
            false => "call".to_string(),
        }
    }

    /// The grammar: `start`, then the rules it needs besides the calls' own.
    fn grammar(self, start: String, extra: Vec<String>) -> String {
        let mut rules = vec![start, format!("call: {}", self.call)];
        rules.extend(extra);
        rules.extend(self.rules);
        rules.join("\n")
    }
}

/// The grammar allowing one call (`parallel` false) or several of `tools`, in `format`.
pub fn tool_call_grammar(format: ToolFormat, tools: &[&FunctionTool], parallel: bool) -> String {
    let c = calls(format, tools);
    let start = format!("start: {} {} {}", c.open, c.list(parallel), c.close);
    c.grammar(start, vec![])
}

/// `tool_choice: "auto"` with `strict` tools: free text until the output starts a call in
/// `format`'s way, then calls as `tool_call_grammar` allows them, `strict` tools' arguments
/// following their schemas and the others' any object. Where a call starts: Hermes' and
/// Mistral's opening tag, anywhere (a lazy lexeme: the text up to the first tag); a JSON
/// object or `<|python_tag|>` at the start (llama3_json) or a `[` there (pythonic), which are
/// what the parsers read as calls.
pub fn auto_call_grammar(format: ToolFormat, tools: &[FunctionTool], parallel: bool) -> String {
    // Python keyword arguments name the properties: only declared ones can be written.
    let shaped: Vec<Cow<FunctionTool>> = tools
        .iter()
        .map(|t| match !t.strict && format != ToolFormat::Pythonic {
            true => Cow::Owned(loose(t)),
            false => Cow::Borrowed(t),
        })
        .collect();
    let shaped: Vec<&FunctionTool> = shaped.iter().map(|t| t.as_ref()).collect();
    let c = calls(format, &shaped);
    let text = r"TEXT: /(?s:.*)/".to_string();
    // After the calls: any text (a call there is parsed too), or, with one call allowed,
    // text that opens no other.
    let rest = |tag: &str| match parallel {
        true => ("TEXT", None),
        false => (
            "REST",
            Some(format!(r"REST: /(?s:.*)/ & ~/(?s:.*){tag}(?s:.*)/")),
        ),
    };
    match format {
        ToolFormat::Hermes => {
            let (after, after_rule) = rest("<tool_call>");
            let start = match parallel {
                true => "start: TEXT | (head body)+ TEXT".to_string(),
                false => format!("start: TEXT | head body {after}"),
            };
            let head = "head[lazy]: TEXT \"<tool_call>\"".to_string();
            c.grammar(
                start,
                [Some(head), Some(text), after_rule]
                    .into_iter()
                    .flatten()
                    .collect(),
            )
        }
        ToolFormat::Mistral => {
            let (after, after_rule) = rest(r"\[TOOL_CALLS\]");
            let list = c.list(parallel);
            let start = format!("start: TEXT | head \"[\" {list} \"]\" {after}");
            let head = "head[lazy]: TEXT \"[TOOL_CALLS]\"".to_string();
            c.grammar(
                start,
                [Some(head), Some(text), after_rule]
                    .into_iter()
                    .flatten()
                    .collect(),
            )
        }
        ToolFormat::Llama3Json | ToolFormat::Pythonic => {
            let (lead, opens) = match format {
                ToolFormat::Llama3Json => ("\"<|python_tag|>\"?", r"(<\|python_tag\|>|\{)"),
                _ => ("", r"\["),
            };
            let (open, list, close) = (c.open, c.list(parallel), c.close);
            let start = format!("start: PLAIN | {lead} {open} {list} {close}");
            let plain = format!(r"PLAIN: /(?s:.*)/ & ~/\s*{opens}(?s:.*)/");
            c.grammar(start, vec![plain])
        }
    }
}
