//! The parsers on text fixtures of each format: the whole text, one character at a time and
//! split at every position read the same calls and content.
use super::parsers::{parse_whole, ParsedOutput, ToolEvent, ToolFormat};
use super::*;
use serde_json::json;

fn out(content: &str, calls: &[(&str, &str)]) -> ParsedOutput {
    ParsedOutput {
        content: content.into(),
        calls: calls
            .iter()
            .map(|(n, a)| (n.to_string(), a.to_string()))
            .collect(),
    }
}

/// Feeds `pieces` one by one, checking that each call starts before its arguments and that
/// indexes count up from 0.
fn streamed(format: ToolFormat, pieces: &[&str]) -> ParsedOutput {
    let mut p = format.parser();
    let mut got = ParsedOutput::default();
    let mut events: Vec<ToolEvent> = vec![];
    for piece in pieces {
        events.extend(p.push(piece));
    }
    events.extend(p.finish());
    let mut started = 0;
    for e in &events {
        match e {
            ToolEvent::Start { index, .. } => {
                assert_eq!(*index, started, "{pieces:?}");
                started += 1;
            }
            ToolEvent::Args { index, text } => {
                assert!(*index < started, "{pieces:?}");
                assert!(!text.is_empty());
            }
            ToolEvent::Content(t) => assert!(!t.is_empty()),
        }
    }
    got.apply(&events);
    got
}

fn check(format: ToolFormat, text: &str, want: ParsedOutput) {
    assert_eq!(parse_whole(format, text), want, "whole: {text:?}");
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(streamed(format, &pieces), want, "char by char: {text:?}");
    for (k, _) in text.char_indices().skip(1) {
        let split = [&text[..k], &text[k..]];
        assert_eq!(streamed(format, &split), want, "split at {k}: {text:?}");
    }
}

#[test]
fn hermes() {
    let f = ToolFormat::Hermes;
    check(
        f,
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        out("Let me check.\n", &[("get_weather", r#"{"city": "Paris"}"#)]),
    );
    // Two calls, one of them with empty arguments.
    check(
        f,
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
        out("", &[("a", "{}"), ("b", r#"{"x": [1, 2]}"#)]),
    );
    // The arguments before the name, as the Hermes template writes past calls.
    check(
        f,
        "<tool_call>\n{ \"arguments\": {\"q\": \"a\\\"}b\"}, \"name\": \"search\"}\n</tool_call> ",
        out("", &[("search", r#"{"q": "a\"}b"}"#)]),
    );
    check(
        f,
        "<tool_call>{\"name\": \"now\"}</tool_call>",
        out("", &[("now", "{}")]),
    );
    check(f, "a < b <tool_ca", out("a < b <tool_ca", &[]));
    check(
        f,
        "<tool_call>not json</tool_call>",
        out("<tool_call>not json</tool_call>", &[]),
    );
    check(
        f,
        "<tool_call>{\"foo\": 1}</tool_call>",
        out("<tool_call>{\"foo\": 1}</tool_call>", &[]),
    );
    // Cut off by max_tokens: the arguments as far as they came.
    check(
        f,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1",
        out("", &[("f", r#"{"a": 1"#)]),
    );
    // Cut inside a call before its name: the call is dropped, the ones before it stand.
    check(
        f,
        "<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>\n{\"name\": \"lis",
        out("", &[("f", "{}")]),
    );
    check(
        f,
        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nDone.",
        out("\nDone.", &[("f", "{}")]),
    );
    check(
        f,
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Zürich 東京\"}}</tool_call>\n",
        out("", &[("f", r#"{"city": "Zürich 東京"}"#)]),
    );
    check(f, "Just text.", out("Just text.", &[]));
    // Numbers whose prefixes are not JSON numbers yet.
    check(
        f,
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1.5, \"b\": -2e3}}</tool_call>",
        out("", &[("f", r#"{"a": 1.5, "b": -2e3}"#)]),
    );
}

#[test]
fn llama3_json() {
    let f = ToolFormat::Llama3Json;
    check(
        f,
        r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#,
        out("", &[("get_weather", r#"{"city": "Paris"}"#)]),
    );
    check(
        f,
        r#"<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"n": 1}}"#,
        out("", &[("a", "{}"), ("b", r#"{"n": 1}"#)]),
    );
    let text = r#"The answer is {"name": "f", "parameters": {}}"#;
    check(f, text, out(text, &[]));
    check(f, r#"{"answer": 42}"#, out(r#"{"answer": 42}"#, &[]));
    check(f, r#" {"name": "f"}"#, out("", &[("f", "{}")]));
    check(f, "<|python", out("<|python", &[]));
    check(f, r#"{"answer": "#, out(r#"{"answer": "#, &[]));
    check(
        f,
        r#"{"name": "f", "parameters": {}}; {"name": "g"#,
        out("", &[("f", "{}")]),
    );
}

#[test]
fn pythonic() {
    let f = ToolFormat::Pythonic;
    check(
        f,
        r#"[get_weather(city="Paris", days=3), now()]"#,
        out(
            "",
            &[
                ("get_weather", r#"{"city": "Paris", "days": 3}"#),
                ("now", "{}"),
            ],
        ),
    );
    check(
        f,
        r#"[f(a='it\'s', b=[1, 2.5, None], c={'k': True, 'n': (1, 2)})]"#,
        out(
            "",
            &[(
                "f",
                r#"{"a": "it's", "b": [1, 2.5, null], "c": {"k": true, "n": [1, 2]}}"#,
            )],
        ),
    );
    check(f, "Sure, [f()]", out("Sure, [f()]", &[]));
    check(f, "[1, 2, 3]", out("[1, 2, 3]", &[]));
    check(f, "[apple, banana]", out("[apple, banana]", &[]));
    check(
        f,
        "<|python_start|>[f(x=-1, y=\"é\")]<|python_end|>",
        out("", &[("f", r#"{"x": -1, "y": "é"}"#)]),
    );
    // Cut off: the keyword arguments complete so far, closed.
    check(f, "[f(a=1, b=\"x", out("", &[("f", r#"{"a": 1}"#)]));
}

#[test]
fn mistral() {
    let f = ToolFormat::Mistral;
    check(
        f,
        r#"[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]"#,
        out("", &[("f", r#"{"a": 1}"#), ("g", "{}")]),
    );
    check(
        f,
        r#"Hi.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}"#,
        out("Hi.", &[("get_weather", r#"{"city": "Paris"}"#)]),
    );
    check(
        f,
        r#"[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{"x": 1}"#,
        out("", &[("a", "{}"), ("b", r#"{"x": 1}"#)]),
    );
    check(
        f,
        r#"[TOOL_CALLS]f[CALL_ID]abc123xyz[ARGS]{"q": 1}"#,
        out("", &[("f", r#"{"q": 1}"#)]),
    );
    check(
        f,
        "[TOOL_CALLS] not a call!",
        out("[TOOL_CALLS] not a call!", &[]),
    );
    check(f, "No tools here.", out("No tools here.", &[]));
}

fn tools_json() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "now"}},
    ])
}

#[test]
fn requests_are_checked_as_vllm_checks_them() {
    let opts = ToolOptions::default();
    let err = |tools: Value, choice: Value| {
        plan(&opts, Some(&tools), Some(&choice), None)
            .unwrap_err()
            .body()["error"]
            .clone()
    };
    let e = err(tools_json(), json!("auto"));
    assert_eq!(e["param"], "tool_choice");
    assert_eq!(
        e["message"],
        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"
    );
    let e = err(
        tools_json(),
        json!({"type": "function", "function": {"name": "nope"}}),
    );
    assert_eq!(
        e["message"],
        "The tool specified in `tool_choice` (\"nope\") does not match any of the specified `tools`."
    );
    let e = err(json!([]), json!("required"));
    assert_eq!(
        e["message"],
        "When using `tool_choice`, `tools` must be set."
    );
    let e = err(json!([{"type": "web_search"}]), json!("required"));
    assert_eq!(e["param"], "tools[0].type");
    let e = err(
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "strin"}}}]),
        json!("required"),
    );
    assert_eq!(e["param"], "tools[0].function.parameters");
    assert_eq!(
        e["message"],
        "tools[0].function.parameters.type must name JSON types (object, array, string, \
         number, integer, boolean, null), got \"strin\"."
    );
    let dup = json!([{"type": "function", "function": {"name": "f"}},
                     {"type": "function", "function": {"name": "f"}}]);
    assert_eq!(
        err(dup, json!("required"))["param"],
        "tools[1].function.name"
    );
    // No tools and no choice: nothing to parse; "none" parses nothing either.
    assert!(plan(&opts, None, None, None).unwrap().is_none());
    assert!(plan(&opts, Some(&tools_json()), Some(&json!("none")), None)
        .unwrap()
        .is_none());
    let auto = ToolOptions::new(Some("pythonic"), true).unwrap();
    let p = plan(&auto, Some(&tools_json()), None, Some(false))
        .unwrap()
        .unwrap();
    assert_eq!(
        (p.format, p.parallel, p.constraint.is_none()),
        (ToolFormat::Pythonic, false, true)
    );
    assert!(ToolOptions::new(Some("nope"), false).is_err());
    assert!(ToolOptions::new(None, true).is_err());
    let m = json!([{"role": "tool", "content": "42"}]);
    assert_eq!(
        check_messages(m.as_array().unwrap()).unwrap_err().body()["error"]["param"],
        "messages[0].tool_call_id"
    );
}

#[test]
fn grammars_take_the_parsers_format() {
    let tools = read_tools(Some(&tools_json())).unwrap();
    let all: Vec<&FunctionTool> = tools.iter().collect();
    let g = grammar::tool_call_grammar(ToolFormat::Hermes, &all, true);
    assert!(g.starts_with("start:  call (\"\\n\" call)* \n"), "{g}");
    for rule in [
        "call: \"<tool_call>\" body",
        "body: \"\\n\" one \"\\n</tool_call>\"",
        "one: tool_0 | tool_1",
    ] {
        assert!(g.lines().any(|l| l == rule), "{rule} not in {g}");
    }
    let g = grammar::tool_call_grammar(ToolFormat::Pythonic, &all[..1], false);
    assert!(
        g.contains("tool_0: \"get_weather(\" \"city=\" %json {"),
        "{g}"
    );
    assert!(g.starts_with("start: \"[\" call \"]\""), "{g}");
}

#[test]
fn strict_defaults_as_openai_has_it() {
    let tool = |strict: Value| {
        let mut f = json!({"name": "f"});
        if !strict.is_null() {
            f["strict"] = strict;
        }
        f
    };
    for (shape, given, want) in [
        (ToolShape::Chat, Value::Null, false),
        (ToolShape::Chat, json!(true), true),
        (ToolShape::Flat, Value::Null, true),
        (ToolShape::Flat, json!(false), false),
    ] {
        let t = match shape {
            ToolShape::Chat => json!([{"type": "function", "function": tool(given.clone())}]),
            ToolShape::Flat => {
                let mut t = tool(given.clone());
                t["type"] = json!("function");
                json!([t])
            }
        };
        let read = read_tools_in(shape, Some(&t)).unwrap();
        assert_eq!(read[0].strict, want, "{shape:?} {given}");
    }
}
