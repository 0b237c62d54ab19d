//! `tool_choice` `required` or a named tool, enforced: a grammar (llguidance's Lark dialect)
//! that allows only the parser's own format, around calls whose `name` is one of the
//! allowed tools and whose arguments follow that tool's `parameters` schema. The output is
//! then read by the same parser as free output.
use super::definitions::FunctionTool;
use super::parsers::ToolFormat;
use crate::structured::close_objects;
use serde_json::{json, Value};

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

/// The grammar allowing one call (`parallel` false) or several of `tools`, in `format`.
pub fn tool_call_grammar(format: ToolFormat, tools: &[&FunctionTool], parallel: bool) -> String {
    let mut rules = vec![];
    let alternatives: Vec<String> = (0..tools.len()).map(|i| format!("tool_{i}")).collect();
    for (i, t) in tools.iter().enumerate() {
        let body = match format {
            ToolFormat::Hermes | ToolFormat::Mistral => json_rule(call_schema(t, "arguments")),
            ToolFormat::Llama3Json => json_rule(call_schema(t, "parameters")),
            ToolFormat::Pythonic => pythonic_call(t),
        };
        rules.push(format!("tool_{i}: {body}"));
    }
    let one = format!("({})", alternatives.join(" | "));
    let (call, sep, open, close) = match format {
        ToolFormat::Hermes => (
            format!("\"<tool_call>\\n\" {one} \"\\n</tool_call>\""),
            "\"\\n\"",
            "",
            "",
        ),
        ToolFormat::Llama3Json => (one, "\"; \"", "", ""),
        ToolFormat::Pythonic => (one, "\", \"", "\"[\"", "\"]\""),
        ToolFormat::Mistral => (one, "\", \"", "\"[TOOL_CALLS][\"", "\"]\""),
    };
    rules.push(format!("call: {call}"));
    let calls = match parallel {
        true => format!("call ({sep} call)*"),
        false => "call".to_string(),
    };
    rules.insert(0, format!("start: {open} {calls} {close}"));
    rules.join("\n")
}
