//! A request's function tools (`tools`): read and checked, each with a usable schema.
use crate::errors::ApiError;
use serde_json::{json, Value};
use std::collections::HashSet;

/// A function tool of the request.
#[derive(Debug, Clone)]
pub struct FunctionTool {
    pub name: String,
    /// Its `parameters` schema (`{"type": "object", "properties": {}}` when absent).
    pub parameters: Value,
    /// Where the request has it (`tools[i].function`, or `tools[i]` when flat).
    pub path: String,
    /// `strict`: its arguments follow `parameters` whenever it is called, also under
    /// `tool_choice: "auto"` (default false in chat completions, true in the Responses API,
    /// as OpenAI's).
    pub strict: bool,
}

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, message)
}

const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// The shape of a JSON schema, as far as tools need it checked before any use: a schema is
/// an object (or a boolean); `type` names JSON types; `properties` maps names to schemas;
/// `required` lists names; `items` is a schema.
fn check_schema(s: &Value, path: &str) -> Result<(), ApiError> {
    let top = path.split('.').take(3).collect::<Vec<_>>().join(".");
    let obj = match s {
        Value::Bool(_) => return Ok(()),
        Value::Object(o) => o,
        _ => {
            return Err(bad(
                &top,
                format!("{path} must be a JSON schema (an object), got {s}."),
            ))
        }
    };
    let type_ok = |t: &Value| t.as_str().is_some_and(|t| TYPES.contains(&t));
    match obj.get("type") {
        None => {}
        Some(Value::Array(ts)) if ts.iter().all(type_ok) => {}
        Some(t) if type_ok(t) => {}
        Some(t) => {
            return Err(bad(
                &top,
                format!(
                    "{path}.type must name JSON types ({}), got {t}.",
                    TYPES.join(", ")
                ),
            ))
        }
    }
    if let Some(props) = obj.get("properties") {
        let Value::Object(props) = props else {
            return Err(bad(&top, format!("{path}.properties must be an object.")));
        };
        for (k, v) in props {
            check_schema(v, &format!("{path}.properties.{k}"))?;
        }
    }
    if let Some(r) = obj.get("required") {
        if !r.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
            return Err(bad(
                &top,
                format!("{path}.required must be a list of names."),
            ));
        }
    }
    if let Some(items) = obj.get("items") {
        check_schema(items, &format!("{path}.items"))?;
    }
    Ok(())
}

/// Where a tool's function is written: chat's `{"type": "function", "function": {"name",
/// ...}}`, or the Responses API's flat `{"type": "function", "name", ...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolShape {
    Chat,
    Flat,
}

/// The request's `tools` (chat's shape): function tools with unique names and schemas.
pub fn read_tools(tools: Option<&Value>) -> Result<Vec<FunctionTool>, ApiError> {
    read_tools_in(ToolShape::Chat, tools)
}

/// The request's `tools` in `shape`; refusals name the field where that shape has it.
pub fn read_tools_in(
    shape: ToolShape,
    tools: Option<&Value>,
) -> Result<Vec<FunctionTool>, ApiError> {
    let list = match tools {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("tools", "tools must be a list of function tools.")),
    };
    let mut seen = HashSet::new();
    let mut out = vec![];
    for (i, t) in list.iter().enumerate() {
        let p = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {}
            Some(other) => {
                return Err(bad(
                    &format!("{p}.type"),
                    format!(
                        "{p}.type must be \"function\", got {other:?}: only function tools are \
                         served."
                    ),
                ))
            }
            None => {
                return Err(bad(
                    &format!("{p}.type"),
                    format!("{p}.type must be \"function\"."),
                ))
            }
        }
        let (f, fp) = match shape {
            ToolShape::Flat => (t, p.clone()),
            ToolShape::Chat => {
                let fp = format!("{p}.function");
                match t.get("function").filter(|f| f.is_object()) {
                    Some(f) => (f, fp),
                    None => return Err(bad(&fp, format!("{fp} must be an object with a name."))),
                }
            }
        };
        let np = format!("{fp}.name");
        let name = match f.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            _ => return Err(bad(&np, format!("{np} must be a non-empty string."))),
        };
        if !seen.insert(name.clone()) {
            return Err(bad(
                &np,
                format!("tool names must be unique: {name:?} is given twice."),
            ));
        }
        let pp = format!("{fp}.parameters");
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(s) => {
                check_schema(s, &pp)?;
                s.clone()
            }
        };
        let strict = match f.get("strict") {
            None | Some(Value::Null) => shape == ToolShape::Flat,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                let sp = format!("{fp}.strict");
                return Err(bad(&sp, format!("{sp} must be a boolean, got {other}.")));
            }
        };
        out.push(FunctionTool {
            name,
            parameters,
            path: fp,
            strict,
        });
    }
    Ok(out)
}
