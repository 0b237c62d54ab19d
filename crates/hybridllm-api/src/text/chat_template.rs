//! Chat templates with minijinja, configured to behave like transformers' Jinja2 sandbox
//! (`trim_blocks`, `lstrip_blocks`, `raise_exception`, `strftime_now`, json.dumps `tojson`,
//! Python method calls such as `.strip()` / `.items()`, and Python `str()` of values).
use crate::text::pyjson::{self, DumpOpts};
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};
use serde::Deserialize;
use serde_json::Value as Json;

const NAME: &str = "chat";

/// A compiled template. Compilation happens once (start-up); rendering is per request.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// transformers refuses continue_final_message for templates that never read `content`.
    mentions_content: bool,
    /// The text it was compiled from, as given (what /tokenizer_info reports).
    source: String,
}

/// Everything a render needs besides the template itself.
#[derive(Debug, Default, Deserialize)]
pub struct RenderInput {
    pub messages: Vec<Json>,
    #[serde(default)]
    pub tools: Option<Json>,
    #[serde(default)]
    pub documents: Option<Json>,
    #[serde(default)]
    pub add_generation_prompt: bool,
    #[serde(default)]
    pub continue_final_message: bool,
    #[serde(default)]
    pub bos_token: String,
    #[serde(default)]
    pub eos_token: String,
    /// Extra template variables (`chat_template_kwargs`); they may override the defaults.
    #[serde(default)]
    pub kwargs: serde_json::Map<String, Json>,
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> Result<Value, Error> {
    use std::fmt::Write;
    let mut s = String::new();
    // chrono reports an invalid format as fmt::Error instead of panicking only via write!.
    write!(s, "{}", chrono::Local::now().format(&fmt)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("bad strftime format {fmt:?}"),
        )
    })?;
    Ok(Value::from(s))
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`; the result is not HTML-escaped.
fn tojson(v: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let mut o = DumpOpts::default();
    if let Some(ind) = kwargs.get::<Option<Value>>("indent")? {
        o.indent = match ind.kind() {
            ValueKind::None | ValueKind::Undefined => None,
            ValueKind::String => Some(ind.as_str().unwrap_or_default().to_string()),
            _ => Some(" ".repeat(i64::try_from(ind)?.max(0) as usize)),
        };
        if o.indent.is_some() {
            o.item_sep = ",".into(); // json.dumps drops the space after ',' when indenting
        }
    }
    if let Some(a) = kwargs.get::<Option<bool>>("ensure_ascii")? {
        o.ensure_ascii = a;
    }
    if let Some(s) = kwargs.get::<Option<bool>>("sort_keys")? {
        o.sort_keys = s;
    }
    if let Some(seps) = kwargs.get::<Option<Vec<String>>>("separators")? {
        if seps.len() == 2 {
            o.item_sep = seps[0].clone();
            o.key_sep = seps[1].clone();
        }
    }
    kwargs.assert_all_used()?;
    Ok(Value::from_safe_string(pyjson::dumps(&v, &o)))
}

/// `x|string` is Python `str(x)` in Jinja2 (`[{'a': 1}]`, `None`, `True`).
fn py_string(v: Value) -> Value {
    Value::from(pyjson::py_str(&v))
}

/// Human-readable template error including line information.
pub fn describe(err: &Error) -> String {
    let mut msg = err.to_string();
    let mut src = std::error::Error::source(err);
    while let Some(e) = src {
        msg.push_str(&format!(": {e}"));
        src = e.source();
    }
    msg
}

impl ChatTemplate {
    pub fn compile(source: &str) -> Result<Self, String> {
        let given = source.to_string();
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_filter("string", py_string);
        // Jinja2's `items` gives nothing for an undefined value (a tool without parameters).
        env.add_filter("items", |v: Value| -> Result<Value, Error> {
            if v.is_undefined() {
                return Ok(Value::from(Vec::<Value>::new()));
            }
            let pairs: Result<Vec<Value>, Error> = v
                .try_iter()?
                .map(|k| Ok(Value::from(vec![k.clone(), v.get_item(&k)?])))
                .collect();
            pairs.map(Value::from)
        });
        // Jinja2: str, list, dict and Undefined (iterates as empty) are iterable; None is not.
        env.add_test("iterable", |v: Value| {
            matches!(
                v.kind(),
                ValueKind::String
                    | ValueKind::Seq
                    | ValueKind::Map
                    | ValueKind::Iterable
                    | ValueKind::Undefined
            )
        });
        // Printed values follow Python's str(): None, True, {'a': 1}; undefined prints nothing.
        env.set_formatter(|out, state, value| match value.kind() {
            ValueKind::String | ValueKind::Undefined => {
                minijinja::escape_formatter(out, state, value)
            }
            _ => out.write_str(&pyjson::py_str(value)).map_err(Error::from),
        });
        // Jinja2 accepts templates with a trailing newline; minijinja does too, but templates
        // stored with CRLF must render the same bytes as Jinja2, which keeps '\r' verbatim.
        // Jinja2 normalises every newline sequence to "\n"; CRLF-stored templates render alike.
        let source = source.replace("\r\n", "\n").replace('\r', "\n");
        let source = rewrite_generation_tags(&source);
        let mentions_content = source.contains("content");
        env.add_template_owned(NAME, source)
            .map_err(|e| format!("invalid chat template: {}", describe(&e)))?;
        Ok(ChatTemplate {
            env,
            mentions_content,
            source: given,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders the prompt; the error text is what the client sees (400).
    pub fn render(&self, input: &RenderInput) -> Result<String, String> {
        if input.continue_final_message && input.add_generation_prompt {
            return Err(
                "continue_final_message and add_generation_prompt are not compatible. \
                Use continue_final_message when you want the model to continue the final \
                message, and add_generation_prompt when you want to add a header that will \
                prompt it to start a new assistant message instead."
                    .into(),
            );
        }
        let mut messages = normalize_messages(&input.messages);
        let final_text = if input.continue_final_message {
            Some(tag_final_message(&mut messages, self.mentions_content)?)
        } else {
            None
        };
        let mut ctx = serde_json::Map::new();
        ctx.insert("messages".into(), Json::Array(messages));
        ctx.insert("tools".into(), input.tools.clone().unwrap_or(Json::Null));
        ctx.insert(
            "documents".into(),
            input.documents.clone().unwrap_or(Json::Null),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Json::Bool(input.add_generation_prompt),
        );
        ctx.insert("bos_token".into(), Json::String(input.bos_token.clone()));
        ctx.insert("eos_token".into(), Json::String(input.eos_token.clone()));
        for (k, v) in &input.kwargs {
            ctx.insert(k.clone(), v.clone());
        }
        let tmpl = self.env.get_template(NAME).map_err(|e| describe(&e))?;
        let rendered = tmpl.render(Value::from_serialize(&ctx)).map_err(|e| {
            // raise_exception's message goes to the client unchanged.
            if e.kind() == ErrorKind::InvalidOperation {
                if let Some(d) = e.detail() {
                    return d.to_string();
                }
            }
            describe(&e)
        })?;
        match final_text {
            Some(text) => cut_at_tag(rendered, &text),
            None => Ok(rendered),
        }
    }
}

/// transformers' `{% generation %}…{% endgeneration %}` (its AssistantTracker extension) only
/// marks assistant spans and renders its body unchanged; minijinja has no such tag, so it
/// becomes `{% if true %}…{% endif %}`, keeping the tags' whitespace-control markers.
fn rewrite_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(pos) = rest.find("{%") {
        out.push_str(&rest[..pos]);
        let tag = &rest[pos..];
        let Some(end) = tag.find("%}") else { break };
        let inner = &tag[2..end];
        let (lead, body) = match inner.chars().next() {
            Some(c @ ('-' | '+')) => (c.to_string(), &inner[1..]),
            _ => (String::new(), inner),
        };
        let (body, trail) = match body.chars().last() {
            Some(c @ ('-' | '+')) => (&body[..body.len() - 1], c.to_string()),
            _ => (body, String::new()),
        };
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => out.push_str(&format!("{{%{lead} {r} {trail}%}}")),
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// What transformers (5.x) does to messages before rendering: keys whose value is null are
/// dropped (templates handle a missing key better than None), and reasoning is exposed under
/// both `thinking` and `reasoning_content`.
fn normalize_messages(messages: &[Json]) -> Vec<Json> {
    messages
        .iter()
        .map(|m| {
            let Json::Object(obj) = m else {
                return m.clone();
            };
            let obj: serde_json::Map<String, Json> = obj
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let reasoning = REASONING_FIELDS.iter().find_map(|k| obj.get(*k)).cloned();
            let Some(r) = reasoning else {
                return Json::Object(obj);
            };
            let mut out = serde_json::Map::new();
            out.insert("thinking".into(), r.clone());
            for (k, v) in obj {
                out.insert(k, v);
            }
            out.insert("reasoning_content".into(), r);
            Json::Object(out)
        })
        .collect()
}

/// Marks the end of the final message's content with a tag (transformers' method) and returns
/// the original text, so the render can be cut right after it.
fn tag_final_message(messages: &mut [Json], mentions_content: bool) -> Result<String, String> {
    let last = messages
        .last_mut()
        .ok_or("continue_final_message is set but the conversation is empty!")?;
    let content = last.get_mut("content").ok_or(
        "continue_final_message is set but the final message has no \"content\" to continue!",
    )?;
    if !mentions_content {
        return Err("continue_final_message is set to \"content\" but this is not an accepted field in the chat_template".into());
    }
    match content {
        Json::String(s) => {
            let orig = s.clone();
            s.push_str(CONTINUE_TAG);
            Ok(orig)
        }
        Json::Array(parts) => {
            for p in parts.iter_mut().rev() {
                if let Some(Json::String(t)) = p.get_mut("text") {
                    let orig = t.clone();
                    t.push_str(CONTINUE_TAG);
                    return Ok(orig);
                }
            }
            Err("continue_final_message is set but we could not find any text to continue in the final message!".into())
        }
        _ => Err(
            "continue_final_message is set but the final message has no \"content\" to continue!"
                .into(),
        ),
    }
}

fn cut_at_tag(rendered: String, final_text: &str) -> Result<String, String> {
    let tag = CONTINUE_TAG.trim();
    if !rendered.contains(final_text.trim()) || !rendered.contains(tag) {
        return Err(format!(
            "continue_final_message is set but the final message does not appear in the chat after \
             applying the chat template! This can happen if the chat template deletes portions of \
             the final message. Please verify the chat template and final message in your chat to \
             ensure they are compatible.Final message to continue: {}",
            final_text.trim()
        ));
    }
    let loc = rendered.rfind(tag).unwrap_or(0);
    if rendered[loc..].starts_with(CONTINUE_TAG) {
        Ok(rendered[..loc].to_string())
    } else {
        Ok(rendered[..loc].trim_end().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(messages: Json) -> RenderInput {
        RenderInput {
            messages: serde_json::from_value(messages).unwrap(),
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
            ..Default::default()
        }
    }

    #[test]
    fn python_semantics() {
        let t = ChatTemplate::compile(
            "{% for m in messages %}{{ m.content.strip() }}|{{ m.x }}|{{ m.meta|string }}|{{ m.meta }}|{{ m.n }}\n{% endfor %}{{ tools }}",
        )
        .unwrap();
        let out = t
            .render(&input(json!([{"role": "user", "content": " hi ", "n": null, "meta": {"a": [1, true, null]}}])))
            .unwrap();
        assert_eq!(
            out,
            "hi||{'a': [1, True, None]}|{'a': [1, True, None]}|\nNone"
        );
    }

    #[test]
    fn tojson_and_raise() {
        let t = ChatTemplate::compile(
            "{{ messages[0]|tojson }}{{ messages[0]|tojson(indent=2) }}{% if messages|length > 1 %}{{ raise_exception('only one') }}{% endif %}",
        )
        .unwrap();
        let m = json!([{"role": "user", "content": "<é>"}]);
        assert_eq!(
            t.render(&input(m)).unwrap(),
            "{\"role\": \"user\", \"content\": \"<é>\"}{\n  \"role\": \"user\",\n  \"content\": \"<é>\"\n}"
        );
        let m = json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]);
        assert_eq!(t.render(&input(m)).unwrap_err(), "only one");
    }

    #[test]
    fn trim_blocks_and_continue_final() {
        let t = ChatTemplate::compile(
            "{% for m in messages %}\n  {% if true %}\n<{{ m.role }}>{{ m.content }}</s>\n  {% endif %}\n{% endfor %}\n",
        )
        .unwrap();
        let mut i = input(
            json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer "}]),
        );
        assert_eq!(
            t.render(&i).unwrap(),
            "<user>q</s>\n<assistant>The answer </s>\n"
        );
        i.continue_final_message = true;
        assert_eq!(t.render(&i).unwrap(), "<user>q</s>\n<assistant>The answer ");
    }

    #[test]
    fn generation_tags_are_transparent() {
        let t = ChatTemplate::compile(
            "{% for m in messages %}{%- generation -%} [{{ m.content }}] {%- endgeneration %}\n{% endfor %}",
        )
        .unwrap();
        let i = input(json!([{"role": "assistant", "content": "x"}]));
        assert_eq!(t.render(&i).unwrap(), "[x]"); // same as transformers
    }

    #[test]
    fn syntax_error_is_reported() {
        let e = ChatTemplate::compile("{% if x %}oops").err().unwrap();
        assert!(e.starts_with("invalid chat template"), "{e}");
    }
}
