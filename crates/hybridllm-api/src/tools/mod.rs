//! Tool calling on chat completions: a request's `tools`, `tool_choice` and
//! `parallel_tool_calls` checked against the server's `--tool-call-parser` and
//! `--enable-auto-tool-choice` (vLLM's flags and refusals), into what its response parses and,
//! for `required` or a named tool, the grammar that enforces a call (`grammar`). The parsers
//! themselves: `stream` (what they share), `parsers`, `pythonic`; the tools: `definitions`.
pub mod definitions;
pub mod grammar;
pub mod parsers;
mod pythonic;
pub mod stream;

use crate::errors::ApiError;
use crate::structured::{Constraint, Kind};
pub use definitions::{read_tools, read_tools_in, FunctionTool, ToolShape};
use parsers::ToolFormat;
use serde_json::Value;

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, message)
}

/// The server's tool-calling flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolOptions {
    /// `--tool-call-parser`.
    pub parser: Option<ToolFormat>,
    /// `--enable-auto-tool-choice`.
    pub auto: bool,
}

impl ToolOptions {
    /// The flags as given; refused as vLLM refuses them at start-up.
    pub fn new(parser: Option<&str>, auto: bool) -> anyhow::Result<Self> {
        let parser = match parser {
            None => None,
            Some(name) => Some(ToolFormat::from_name(name).ok_or_else(|| {
                let names: Vec<&str> = ToolFormat::ALL.iter().map(|f| f.name()).collect();
                anyhow::anyhow!(
                    "--tool-call-parser {name:?} is not one of this server's parsers: {}",
                    names.join(", ")
                )
            })?),
        };
        if auto && parser.is_none() {
            anyhow::bail!("--enable-auto-tool-choice requires --tool-call-parser to be set");
        }
        Ok(ToolOptions { parser, auto })
    }
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// What a request's tools ask of its response.
#[derive(Debug)]
pub struct ToolPlan {
    pub format: ToolFormat,
    /// More than one call per turn (`parallel_tool_calls`).
    pub parallel: bool,
    /// The grammar of `required` or a named tool, or of `auto` with `strict` tools.
    pub constraint: Option<Constraint>,
    /// Whether the constraint forces a call (`required`, a named tool), rather than shaping
    /// the calls the model makes (`auto`).
    pub forced: bool,
}

const NAMED_USAGE: &str =
    "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";

/// `tool_choice` as given (absent: `auto` when there are tools, else `none`).
pub fn read_choice(choice: Option<&Value>, tools: &[FunctionTool]) -> Result<ToolChoice, ApiError> {
    read_choice_in(ToolShape::Chat, choice, tools)
}

/// The Responses API's `tool_choice`: `{"type": "function", "name": ...}` names a tool; any
/// other type is a built-in tool's, which is not served.
fn read_flat_choice(o: &serde_json::Map<String, Value>) -> Result<ToolChoice, ApiError> {
    let p = "tool_choice";
    match o.get("type").and_then(Value::as_str) {
        Some("function") => match o.get("name") {
            Some(Value::String(n)) if !n.is_empty() => Ok(ToolChoice::Named(n.clone())),
            _ => Err(bad(
                p,
                "Expected field `name` in `tool_choice`. Correct usage:                  `{\"type\": \"function\", \"name\": \"my_function\"}`",
            )),
        },
        t => Err(bad(
            p,
            format!(
                "tool_choice of type {} is not supported: only function tools are served.",
                t.map_or("<missing>".to_string(), |t| format!("{t:?}"))
            ),
        )),
    }
}

fn read_choice_in(
    shape: ToolShape,
    choice: Option<&Value>,
    tools: &[FunctionTool],
) -> Result<ToolChoice, ApiError> {
    let p = "tool_choice";
    let c = match choice {
        // OpenAI's Responses default: "auto" with no tools asks for nothing.
        Some(Value::String(s)) if shape == ToolShape::Flat && s == "auto" && tools.is_empty() => {
            ToolChoice::None
        }
        Some(Value::Object(o)) if shape == ToolShape::Flat => read_flat_choice(o)?,
        None | Some(Value::Null) if tools.is_empty() => ToolChoice::None,
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => return Err(bad(
                p,
                "`tool_choice` must either be a named tool, \"auto\", \"required\" or \"none\".",
            )),
        },
        Some(Value::Object(o)) => {
            let f = o.get("function").filter(|f| f.is_object()).ok_or_else(|| {
                bad(
                    p,
                    format!("Expected field `function` in `tool_choice`. {NAMED_USAGE}"),
                )
            })?;
            match f.get("name") {
                Some(Value::String(n)) if !n.is_empty() => ToolChoice::Named(n.clone()),
                _ => {
                    return Err(bad(
                        p,
                        format!(
                            "Expected field `name` in `function` in `tool_choice`. {NAMED_USAGE}"
                        ),
                    ))
                }
            }
        }
        Some(_) => {
            return Err(bad(
                p,
                "`tool_choice` must either be a named tool, \"auto\", \"required\" or \"none\".",
            ))
        }
    };
    if c != ToolChoice::None && tools.is_empty() {
        return Err(bad(p, "When using `tool_choice`, `tools` must be set."));
    }
    if let ToolChoice::Named(n) = &c {
        if !tools.iter().any(|t| &t.name == n) {
            return Err(bad(
                p,
                format!(
                    "The tool specified in `tool_choice` ({n:?}) does not match any of the \
                     specified `tools`."
                ),
            ));
        }
    }
    Ok(c)
}

/// What a chat request's tools ask of its response (None: no call is parsed).
pub fn plan(
    opts: &ToolOptions,
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> Result<Option<ToolPlan>, ApiError> {
    plan_in(ToolShape::Chat, opts, tools, choice, parallel)
}

/// What a request's tools, written in `shape`, ask of its response.
pub fn plan_in(
    shape: ToolShape,
    opts: &ToolOptions,
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> Result<Option<ToolPlan>, ApiError> {
    let tools = read_tools_in(shape, tools)?;
    let choice = read_choice_in(shape, choice, &tools)?;
    let parallel = parallel.unwrap_or(true);
    let allowed: Vec<&FunctionTool> = match &choice {
        ToolChoice::None => return Ok(None),
        ToolChoice::Auto => {
            return match (opts.auto, opts.parser) {
                (true, Some(format)) => Ok(Some(ToolPlan {
                    format,
                    parallel,
                    constraint: auto_constraint(format, &tools, parallel),
                    forced: false,
                })),
                _ => Err(bad(
                    "tool_choice",
                    "\"auto\" tool choice requires --enable-auto-tool-choice and \
                     --tool-call-parser to be set",
                )),
            };
        }
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(n) => tools.iter().filter(|t| &t.name == n).collect(),
    };
    // `required` and a named tool work without a parser flag, as in vLLM: in Hermes' format.
    let format = opts.parser.unwrap_or(ToolFormat::Hermes);
    let parallel = parallel && choice == ToolChoice::Required;
    let lark = grammar::tool_call_grammar(format, &allowed, parallel);
    let parts = schema_parts(allowed.iter().copied());
    Ok(Some(ToolPlan {
        format,
        parallel,
        constraint: Some(Constraint::new("tool_choice", Kind::Grammar(lark)).with_parts(parts)),
        forced: true,
    }))
}

/// Each tool's schema alone, to name the one that cannot be enforced.
fn schema_parts<'a>(tools: impl Iterator<Item = &'a FunctionTool>) -> Vec<Constraint> {
    tools
        .map(|t| {
            Constraint::new(
                &format!("{}.parameters", t.path),
                Kind::Json(t.parameters.clone()),
            )
        })
        .collect()
}

/// `auto` with `strict` tools: the calls the model makes are shaped as `strict` asks; without
/// any, nothing is constrained.
fn auto_constraint(
    format: ToolFormat,
    tools: &[FunctionTool],
    parallel: bool,
) -> Option<Constraint> {
    if !tools.iter().any(|t| t.strict) {
        return None;
    }
    let lark = grammar::auto_call_grammar(format, tools, parallel);
    let parts = schema_parts(tools.iter().filter(|t| t.strict));
    Some(Constraint::new("tools", Kind::Grammar(lark)).with_parts(parts))
}

/// Checks the tool messages of a conversation: a `tool` message answers a call by its id.
pub fn check_messages(messages: &[Value]) -> Result<(), ApiError> {
    for (i, m) in messages.iter().enumerate() {
        if m.get("role").and_then(Value::as_str) == Some("tool")
            && !m.get("tool_call_id").is_some_and(Value::is_string)
        {
            let p = format!("messages[{i}].tool_call_id");
            return Err(bad(
                &p,
                format!("{p} is required: a tool message answers a call by its id."),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
