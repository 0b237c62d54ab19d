//! Structured outputs, the request side: the fields that constrain the output (OpenAI's
//! `response_format`, vLLM's `structured_outputs` and older `guided_*`, the Responses API's
//! `text.format`) read into one constraint, turned into one llguidance grammar and compiled
//! against the model's vocabulary at validation, so that what llguidance cannot enforce is a
//! 400 naming the field. The grammar then travels to the engine in `SamplingParams.grammar`
//! (docs/structured_outputs.md).
use crate::errors::ApiError;
use crate::reasoning::ReplyStart;
use crate::text::tokenizer::Tokenizer;
use llguidance::api::{GrammarInit, ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{ApproximateTokEnv, InferenceCapabilities, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Logger, Matcher, ParserFactory};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use utoipa::ToSchema;

/// The output-constraint fields of chat and completion requests (flattened into both).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ConstraintFields {
    pub response_format: Option<ResponseFormat>,
    /// vLLM's structured outputs: exactly one of its constraint fields.
    pub structured_outputs: Option<StructuredOutputs>,
    /// vLLM's older names for `structured_outputs.json`, `.regex`, `.choice` and `.grammar`.
    #[schema(value_type = Option<Object>)]
    pub guided_json: Option<Value>,
    pub guided_regex: Option<String>,
    pub guided_choice: Option<Vec<String>>,
    pub guided_grammar: Option<String>,
    /// `guidance`, `llguidance` or `auto`: the one backend served.
    pub guided_decoding_backend: Option<String>,
    pub guided_whitespace_pattern: Option<String>,
}

/// OpenAI's `response_format`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// No constraint.
    Text,
    /// Any JSON object.
    JsonObject,
    JsonSchema {
        json_schema: JsonSchemaFormat,
    },
}

/// A named JSON schema, as `response_format.json_schema` and the Responses API's
/// `text.format` carry it.
#[derive(Debug, Deserialize, ToSchema)]
pub struct JsonSchemaFormat {
    /// 1 to 64 of a-z, A-Z, 0-9, `_` and `-` (OpenAI's rule).
    pub name: String,
    pub description: Option<String>,
    #[schema(value_type = Object)]
    pub schema: Option<Value>,
    /// Enforced either way: the grammar is the schema.
    pub strict: Option<bool>,
}

/// The Responses API's `text.format`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextFormat {
    Text,
    JsonObject,
    JsonSchema(JsonSchemaFormat),
}

/// The Responses API's `text` (its `format`; other keys are ignored).
#[derive(ToSchema)]
#[allow(dead_code)] // a schema only
pub struct ResponsesText {
    format: Option<TextFormat>,
}

/// vLLM's `structured_outputs` request field.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct StructuredOutputs {
    /// A JSON schema (an object, or its JSON text).
    #[schema(value_type = Option<Object>)]
    pub json: Option<Value>,
    /// A regular expression the whole output matches.
    pub regex: Option<String>,
    /// The output is one of these strings.
    pub choice: Option<Vec<String>>,
    /// A grammar in llguidance's Lark dialect (or its serialized JSON form).
    pub grammar: Option<String>,
    /// Any JSON object.
    pub json_object: Option<bool>,
    /// Refused: not served.
    pub structural_tag: Option<String>,
    /// No fallback backend exists: accepted and without effect.
    pub disable_fallback: Option<bool>,
    /// JSON without whitespace between tokens.
    pub disable_any_whitespace: Option<bool>,
    /// Objects of the schema without `additionalProperties` get `false`.
    pub disable_additional_properties: Option<bool>,
    /// A regex for the whitespace JSON may have between tokens.
    pub whitespace_pattern: Option<String>,
}

/// What the output must be.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Json(Value),
    JsonObject,
    Regex(String),
    Choice(Vec<String>),
    Grammar(String),
}

/// One request's constraint: what it asks for, under which field, and its JSON options.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    /// The request field that set it, as refusals name it.
    pub param: String,
    pub kind: Kind,
    disable_any_whitespace: Option<bool>,
    disable_additional_properties: Option<bool>,
    whitespace_pattern: Option<String>,
    /// Constraints it is made of, compiled one by one when it fails to name the culprit
    /// (a tool grammar's schemas).
    parts: Vec<Constraint>,
    /// With a reasoning parser: the reply may reason freely before the constrained part.
    pub after_reasoning: Option<ReplyStart>,
}

impl Constraint {
    pub(crate) fn new(param: &str, kind: Kind) -> Self {
        Constraint {
            param: param.to_string(),
            kind,
            disable_any_whitespace: None,
            disable_additional_properties: None,
            whitespace_pattern: None,
            parts: vec![],
            after_reasoning: None,
        }
    }

    pub(crate) fn with_parts(mut self, parts: Vec<Constraint>) -> Self {
        self.parts = parts;
        self
    }
}

fn bad(param: &str, message: String) -> ApiError {
    ApiError::bad_param(param, message)
}

/// A schema given as an object or as its JSON text.
fn schema_value(param: &str, v: &Value) -> Result<Value, ApiError> {
    match v {
        Value::String(s) => serde_json::from_str(s)
            .map_err(|e| bad(param, format!("{param} is not valid JSON: {e}."))),
        v => Ok(v.clone()),
    }
}

fn json_schema_format(param: &str, f: &JsonSchemaFormat) -> Result<Constraint, ApiError> {
    let name_ok = (1..=64).contains(&f.name.len())
        && f.name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !name_ok {
        return Err(bad(
            &format!("{param}.name"),
            format!(
                "{param}.name must be 1 to 64 letters, digits, underscores or dashes, got {:?}.",
                f.name
            ),
        ));
    }
    let Some(schema) = &f.schema else {
        let p = format!("{param}.schema");
        return Err(bad(&p, format!("{p} is required.")));
    };
    Ok(Constraint::new(
        &format!("{param}.schema"),
        Kind::Json(schema.clone()),
    ))
}

impl StructuredOutputs {
    /// vLLM's offline `StructuredOutputsParams` (these fields) as llguidance's serialized
    /// grammar under the default options: what the offline engine compiles, so that offline
    /// and served requests get the same grammar.
    pub fn serialized_grammar(&self) -> Result<String, ApiError> {
        let g = self.constraint()?.grammar(&StructuredOptions::default())?;
        serde_json::to_string(&g).map_err(|e| ApiError::Internal(e.to_string()))
    }

    fn constraint(&self) -> Result<Constraint, ApiError> {
        const P: &str = "structured_outputs";
        let mut set: Vec<(&str, Kind)> = vec![];
        if let Some(j) = &self.json {
            set.push((
                "json",
                Kind::Json(schema_value("structured_outputs.json", j)?),
            ));
        }
        if let Some(r) = &self.regex {
            set.push(("regex", Kind::Regex(r.clone())));
        }
        if let Some(c) = &self.choice {
            set.push(("choice", Kind::Choice(c.clone())));
        }
        if let Some(g) = &self.grammar {
            set.push(("grammar", Kind::Grammar(g.clone())));
        }
        if self.json_object == Some(true) {
            set.push(("json_object", Kind::JsonObject));
        }
        if self.structural_tag.is_some() {
            return Err(bad(
                "structured_outputs.structural_tag",
                "structured_outputs.structural_tag is not supported: use json, regex, choice, \
                 grammar or json_object."
                    .into(),
            ));
        }
        if set.len() != 1 {
            let got: Vec<&str> = set.iter().map(|(f, _)| *f).collect();
            return Err(bad(
                P,
                format!(
                    "{P} must set exactly one of json, regex, choice, grammar or json_object, \
                     got {}.",
                    if got.is_empty() {
                        "none".to_string()
                    } else {
                        got.join(", ")
                    }
                ),
            ));
        }
        let (field, kind) = set.remove(0);
        Ok(Constraint {
            disable_any_whitespace: self.disable_any_whitespace,
            disable_additional_properties: self.disable_additional_properties,
            whitespace_pattern: self.whitespace_pattern.clone(),
            ..Constraint::new(&format!("{P}.{field}"), kind)
        })
    }
}

/// The one constraint of a request, if any; more than one is refused naming them.
fn only_one(found: Vec<Constraint>) -> Result<Option<Constraint>, ApiError> {
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|c| c.param.as_str()).collect();
        return Err(bad(
            &found[1].param,
            format!(
                "only one output constraint may be set per request, got {}.",
                names.join(" and ")
            ),
        ));
    }
    Ok(found.into_iter().next())
}

impl ConstraintFields {
    /// The request's constraint (None: free text), read and checked but not compiled.
    pub fn constraint(&self) -> Result<Option<Constraint>, ApiError> {
        let mut found = vec![];
        match &self.response_format {
            None | Some(ResponseFormat::Text) => {}
            Some(ResponseFormat::JsonObject) => {
                found.push(Constraint::new("response_format", Kind::JsonObject))
            }
            Some(ResponseFormat::JsonSchema { json_schema }) => found.push(json_schema_format(
                "response_format.json_schema",
                json_schema,
            )?),
        }
        if let Some(so) = &self.structured_outputs {
            found.push(so.constraint()?);
        }
        if let Some(j) = &self.guided_json {
            found.push(Constraint::new(
                "guided_json",
                Kind::Json(schema_value("guided_json", j)?),
            ));
        }
        if let Some(r) = &self.guided_regex {
            found.push(Constraint::new("guided_regex", Kind::Regex(r.clone())));
        }
        if let Some(c) = &self.guided_choice {
            found.push(Constraint::new("guided_choice", Kind::Choice(c.clone())));
        }
        if let Some(g) = &self.guided_grammar {
            found.push(Constraint::new("guided_grammar", Kind::Grammar(g.clone())));
        }
        if let Some(b) = &self.guided_decoding_backend {
            check_backend("guided_decoding_backend", b)?;
        }
        let mut one = only_one(found)?;
        if let (Some(c), Some(w)) = (&mut one, &self.guided_whitespace_pattern) {
            c.whitespace_pattern.get_or_insert_with(|| w.clone());
        }
        Ok(one)
    }
}

impl TextFormat {
    /// The Responses API's `text.format` as a constraint (None: plain text).
    pub fn constraint(&self) -> Result<Option<Constraint>, ApiError> {
        Ok(match self {
            TextFormat::Text => None,
            TextFormat::JsonObject => Some(Constraint::new("text.format", Kind::JsonObject)),
            TextFormat::JsonSchema(f) => Some(json_schema_format("text.format", f)?),
        })
    }
}

/// The backends a request or the server may name: llguidance's, under vLLM's names.
const BACKENDS: &[&str] = &["auto", "guidance", "llguidance"];

fn check_backend(param: &str, name: &str) -> Result<(), ApiError> {
    if BACKENDS.contains(&name) {
        return Ok(());
    }
    Err(bad(
        param,
        format!(
            "{param} must be one of {}, got {name:?}.",
            BACKENDS.join(", ")
        ),
    ))
}

/// vLLM's `--structured-outputs-config`, with this server's limits on what a request may ask.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StructuredOptions {
    /// `auto`, `guidance` or `llguidance`: llguidance is the one served.
    pub backend: String,
    /// JSON without whitespace between tokens, unless a request says otherwise.
    pub disable_any_whitespace: bool,
    /// Objects without `additionalProperties` get `false`, unless a request says otherwise.
    pub disable_additional_properties: bool,
    /// The largest constraint a request may send: a schema's JSON text, a regex, a grammar or
    /// the choices, in bytes.
    pub max_bytes: usize,
    /// The deepest nesting of a schema's JSON (objects and arrays).
    pub max_depth: usize,
    /// The longest a grammar may take to compile, in milliseconds (llguidance's own limits
    /// bound the work; this refuses what took longer than a request should wait).
    pub max_compile_ms: u64,
}

impl Default for StructuredOptions {
    fn default() -> Self {
        StructuredOptions {
            backend: "auto".into(),
            disable_any_whitespace: false,
            disable_additional_properties: false,
            max_bytes: 512 << 10,
            max_depth: 64,
            max_compile_ms: 2000,
        }
    }
}

impl StructuredOptions {
    /// The options from `--structured-outputs-config`'s JSON ("" or null: the defaults).
    pub fn parse(json: &str) -> anyhow::Result<Self> {
        let o: Self = match json.trim() {
            "" | "null" => Self::default(),
            j => serde_json::from_str(j)
                .map_err(|e| anyhow::anyhow!("--structured-outputs-config: {e}"))?,
        };
        o.check()?;
        Ok(o)
    }

    /// The backend is one served.
    pub fn check(&self) -> anyhow::Result<()> {
        check_backend("backend", &self.backend)
            .map_err(|e| anyhow::anyhow!("--structured-outputs-config: {e}"))
    }
}

/// The deepest nesting of objects and arrays in `v` (a scalar: 0), stopping past `limit`.
fn depth(v: &Value, limit: usize) -> usize {
    if limit == 0 {
        return 1;
    }
    match v {
        Value::Object(o) => 1 + o.values().map(|x| depth(x, limit - 1)).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(|x| depth(x, limit - 1)).max().unwrap_or(0),
        _ => 0,
    }
}

/// vLLM's `disable_additional_properties`: every object schema that says nothing of
/// `additionalProperties` gets `false`.
pub(crate) fn close_objects(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let is_object = o.get("type") == Some(&json!("object")) || o.contains_key("properties");
            if is_object && !o.contains_key("additionalProperties") {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            o.values_mut().for_each(close_objects);
        }
        Value::Array(a) => a.iter_mut().for_each(close_objects),
        _ => {}
    }
}

impl Constraint {
    /// The constraint as llguidance's grammar, under the options (not compiled).
    pub fn grammar(&self, o: &StructuredOptions) -> Result<TopLevelGrammar, ApiError> {
        let g = self.content_grammar(o)?;
        Ok(match self.after_reasoning {
            Some(start) => start.wrap_grammar(g),
            None => g,
        })
    }

    /// The grammar of what the constraint asks for itself.
    fn content_grammar(&self, o: &StructuredOptions) -> Result<TopLevelGrammar, ApiError> {
        let (c, p) = (self, self.param.as_str());
        Ok(match &c.kind {
            Kind::Json(schema) => {
                let mut schema = match schema {
                    Value::Object(_) => schema.clone(),
                    // `true` allows any JSON value; `false`, none.
                    Value::Bool(true) => json!({}),
                    Value::Bool(false) => {
                        return Err(bad(p, format!("{p} is false: no output satisfies it.")))
                    }
                    _ => {
                        return Err(bad(
                            p,
                            format!("{p} must be a JSON schema (an object), got {schema}."),
                        ))
                    }
                };
                let d = depth(&schema, o.max_depth + 1);
                if d > o.max_depth {
                    return Err(bad(
                        p,
                        format!("{p} must nest at most {} levels deep.", o.max_depth),
                    ));
                }
                if c.disable_additional_properties
                    .unwrap_or(o.disable_additional_properties)
                {
                    close_objects(&mut schema);
                }
                let mut x = json!({
                    "whitespace_flexible": !c.disable_any_whitespace.unwrap_or(o.disable_any_whitespace),
                });
                if let Some(w) = &c.whitespace_pattern {
                    x["whitespace_pattern"] = json!(w);
                }
                if let Some(own) = schema.get("x-guidance") {
                    llguidance::json_merge(&mut x, own);
                }
                schema["x-guidance"] = x;
                TopLevelGrammar::from_json_schema(schema)
            }
            Kind::JsonObject => {
                let ws = !c.disable_any_whitespace.unwrap_or(o.disable_any_whitespace);
                TopLevelGrammar::from_json_schema(
                    json!({"type": "object", "x-guidance": {"whitespace_flexible": ws}}),
                )
            }
            Kind::Regex(r) => {
                if r.is_empty() {
                    return Err(bad(p, format!("{p} must not be empty.")));
                }
                TopLevelGrammar::from_regex(r)
            }
            Kind::Choice(cs) => {
                if cs.is_empty() {
                    return Err(bad(p, format!("{p} must be a non-empty list of strings.")));
                }
                // JSON string literals are literals in llguidance's Lark dialect.
                let alternatives: Vec<String> = cs.iter().map(|s| json!(s).to_string()).collect();
                TopLevelGrammar::from_lark(format!("start: {}", alternatives.join(" | ")))
            }
            Kind::Grammar(g) => TopLevelGrammar::from_lark_or_grammar_list(g)
                .map_err(|e| bad(p, format!("{p} is not a grammar llguidance reads: {e}.")))?,
        })
    }
}

/// Compiles constraints against the model's vocabulary: one per server, shared by requests.
pub struct GrammarCompiler {
    factory: ParserFactory,
    pub options: StructuredOptions,
}

impl GrammarCompiler {
    /// From the tokenizer's JSON (its vocabulary as bytes), the model's vocabulary size (the
    /// logits' width) and EOS ids.
    pub fn new(
        tokenizer_json: &Value,
        vocab_size: usize,
        eos_token_ids: &[u32],
        options: StructuredOptions,
    ) -> anyhow::Result<Self> {
        let mut words = llguidance::token_bytes_from_tokenizer_json(tokenizer_json)?;
        words.resize(words.len().max(vocab_size), vec![]);
        let eos = eos_token_ids.first().copied().unwrap_or(0);
        let mut trie = TokTrie::from(&TokRxInfo::new(words.len() as u32, eos), &words);
        if eos_token_ids.len() > 1 {
            trie = trie.with_eos_tokens(eos_token_ids);
        }
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        // No slices: they speed up the masks of the engine, not this one check.
        let mut factory = ParserFactory::new(&env, InferenceCapabilities::default(), &[])?;
        factory.quiet();
        Ok(GrammarCompiler { factory, options })
    }

    /// For the API's tokenizer (its JSON holds the vocabulary).
    pub fn for_tokenizer(
        tokenizer: &Tokenizer,
        vocab_size: usize,
        eos_token_ids: &[u32],
        options: StructuredOptions,
    ) -> anyhow::Result<Self> {
        Self::new(&tokenizer.to_json()?, vocab_size, eos_token_ids, options)
    }

    fn limits(&self) -> ParserLimits {
        ParserLimits {
            verbose_errors: false,
            ..ParserLimits::default()
        }
    }

    /// The constraint as llguidance's serialized grammar (what the engine compiles), after
    /// checking its size and nesting and compiling it here: a constraint that does not compile,
    /// or that nothing can satisfy, is a 400 naming the field with llguidance's reason.
    pub fn compile(&self, c: &Constraint) -> Result<String, ApiError> {
        self.compile_one(c).map_err(|e| {
            c.parts
                .iter()
                .find_map(|part| self.compile_one(part).err())
                .unwrap_or(e)
        })
    }

    fn compile_one(&self, c: &Constraint) -> Result<String, ApiError> {
        let p = c.param.as_str();
        let o = &self.options;
        let bytes = match &c.kind {
            Kind::Json(v) => serde_json::to_string(v).map_or(usize::MAX, |s| s.len()),
            Kind::JsonObject => 0,
            Kind::Regex(s) | Kind::Grammar(s) => s.len(),
            Kind::Choice(cs) => cs.iter().map(String::len).sum(),
        };
        if bytes > o.max_bytes {
            return Err(bad(
                p,
                format!("{p} must be at most {} bytes, got {bytes}.", o.max_bytes),
            ));
        }
        let grammar = c.grammar(o)?;
        let serialized =
            serde_json::to_string(&grammar).map_err(|e| ApiError::Internal(e.to_string()))?;
        let start = Instant::now();
        let parser = self.factory.create_parser_from_init_ext(
            GrammarInit::Serialized(grammar),
            Logger::new(0, 0),
            InferenceCapabilities::default(),
            self.limits(),
        );
        let mut matcher = Matcher::new(parser);
        // The first mask: a constraint nothing satisfies allows no token at all.
        let first = matcher.compute_mask();
        if let Some(e) = matcher.get_error() {
            return Err(bad(p, format!("{p} cannot be enforced: {}", clean(&e))));
        }
        if first.is_ok_and(|m| m.is_zero()) {
            return Err(bad(
                p,
                format!("{p} cannot be satisfied: no output matches it."),
            ));
        }
        let took = start.elapsed();
        if took > Duration::from_millis(o.max_compile_ms) {
            return Err(bad(
                p,
                format!(
                    "{p} took {} ms to compile, more than the server's limit of {} ms.",
                    took.as_millis(),
                    o.max_compile_ms
                ),
            ));
        }
        Ok(serialized)
    }
}

/// llguidance's message without its trailing parser dump, ending in one full stop.
fn clean(e: &str) -> String {
    let first = e.split("\n<state>").next().unwrap_or(e).trim();
    let first = first.strip_prefix("Error: ").unwrap_or(first);
    match first.ends_with('.') {
        true => first.to_string(),
        false => format!("{first}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::parse_body;

    /// A byte-level vocabulary of the 256 bytes (GPT-2's byte-to-character map) and an EOS.
    fn compiler(options: StructuredOptions) -> GrammarCompiler {
        let chars = (0..=255u32).map(|b| {
            let printable = matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
            let below = (0..b)
                .filter(|c| !matches!(c, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff))
                .count() as u32;
            let c = if printable { b } else { 256 + below };
            char::from_u32(c).unwrap().to_string()
        });
        let vocab: serde_json::Map<String, Value> =
            chars.enumerate().map(|(i, c)| (c, json!(i))).collect();
        let tok = json!({
            "added_tokens": [{"id": 256, "content": "</s>", "special": true}],
            "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab},
        });
        GrammarCompiler::new(&tok, 257, &[256], options).unwrap()
    }

    #[derive(Deserialize, ToSchema)]
    struct Req {
        #[serde(flatten)]
        c: ConstraintFields,
    }
    impl crate::request::RequestBody for Req {
        const GROUPS: &'static [crate::request::FieldError] =
            &[crate::request::field_error::<ConstraintFields>];
    }

    fn constraint(body: Value) -> Result<Option<Constraint>, ApiError> {
        parse_body::<Req>(body.to_string().as_bytes())?
            .c
            .constraint()
    }

    fn refusal(body: Value) -> (String, String) {
        let c = compiler(StructuredOptions::default());
        let e = match constraint(body) {
            Ok(Some(k)) => c.compile(&k).unwrap_err(),
            Ok(None) => panic!("no constraint"),
            Err(e) => e,
        };
        let b = e.body();
        (
            b["error"]["param"].as_str().unwrap_or_default().to_string(),
            b["error"]["message"].as_str().unwrap().to_string(),
        )
    }

    #[test]
    fn each_form_compiles_to_one_grammar() {
        let c = compiler(StructuredOptions::default());
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        for (body, param) in [
            (
                json!({"response_format": {"type": "json_schema",
                       "json_schema": {"name": "a", "schema": schema}}}),
                "response_format.json_schema.schema",
            ),
            (
                json!({"response_format": {"type": "json_object"}}),
                "response_format",
            ),
            (
                json!({"structured_outputs": {"regex": "[a-z]+"}}),
                "structured_outputs.regex",
            ),
            (
                json!({"structured_outputs": {"choice": ["a", "b\""]}}),
                "structured_outputs.choice",
            ),
            (
                json!({"structured_outputs": {"json": schema.to_string()}}),
                "structured_outputs.json",
            ),
            (json!({"guided_grammar": "start: \"x\"+"}), "guided_grammar"),
            (json!({"guided_json": schema}), "guided_json"),
        ] {
            let k = constraint(body).unwrap().unwrap();
            assert_eq!(k.param, param);
            let g: Value = serde_json::from_str(&c.compile(&k).unwrap()).unwrap();
            assert_eq!(g["grammars"].as_array().unwrap().len(), 1, "{g}");
        }
        assert!(constraint(json!({"response_format": {"type": "text"}}))
            .unwrap()
            .is_none());
        assert!(constraint(json!({})).unwrap().is_none());
    }

    #[test]
    fn refusals_name_the_field_and_the_reason() {
        let cases = [
            (
                json!({"guided_json": {"type": "nonsense"}}),
                "guided_json",
                "guided_json cannot be enforced: Invalid type: nonsense.",
            ),
            (
                json!({"guided_json": {"type": "integer", "minimum": 5, "maximum": 1}}),
                "guided_json",
                "guided_json cannot be enforced: Unsatisfiable schema: minimum (5) is greater \
                 than maximum (1).",
            ),
            (
                json!({"guided_json": false}),
                "guided_json",
                "guided_json is false: no output satisfies it.",
            ),
            (
                json!({"guided_json": "{"}),
                "guided_json",
                "guided_json is not valid JSON: EOF while parsing an object at line 1 column 1.",
            ),
            (
                json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}),
                "structured_outputs",
                "structured_outputs must set exactly one of json, regex, choice, grammar or \
                 json_object, got regex, choice.",
            ),
            (
                json!({"structured_outputs": {}}),
                "structured_outputs",
                "structured_outputs must set exactly one of json, regex, choice, grammar or \
                 json_object, got none.",
            ),
            (
                json!({"response_format": {"type": "json_object"}, "guided_regex": "a"}),
                "guided_regex",
                "only one output constraint may be set per request, got response_format and \
                 guided_regex.",
            ),
            (
                json!({"response_format": {"type": "json_schema",
                       "json_schema": {"name": "a b", "schema": {}}}}),
                "response_format.json_schema.name",
                "response_format.json_schema.name must be 1 to 64 letters, digits, \
                 underscores or dashes, got \"a b\".",
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}),
                "response_format.json_schema.schema",
                "response_format.json_schema.schema is required.",
            ),
            (
                json!({"guided_choice": []}),
                "guided_choice",
                "guided_choice must be a non-empty list of strings.",
            ),
            (
                json!({"guided_decoding_backend": "xgrammar", "guided_regex": "a"}),
                "guided_decoding_backend",
                "guided_decoding_backend must be one of auto, guidance, llguidance, got \
                 \"xgrammar\".",
            ),
        ];
        for (body, param, message) in cases {
            let (p, m) = refusal(body.clone());
            assert_eq!((p.as_str(), m.as_str()), (param, message), "{body}");
        }
        let (p, m) = refusal(json!({"guided_regex": "("}));
        assert_eq!(p, "guided_regex");
        assert!(m.starts_with("guided_regex cannot be enforced: "), "{m}");
        assert!(m.contains("unclosed group"), "{m}");
        let (p, _) = refusal(json!({"response_format": {"type": "json_schemas"}}));
        assert_eq!(p, "response_format");
    }

    #[test]
    fn limits_refuse_what_is_too_large_or_too_deep() {
        let c = compiler(StructuredOptions {
            max_bytes: 100,
            max_depth: 4,
            ..StructuredOptions::default()
        });
        let big = Constraint::new("guided_regex", Kind::Regex("a".repeat(101)));
        assert_eq!(
            c.compile(&big).unwrap_err().to_string(),
            "guided_regex must be at most 100 bytes, got 101."
        );
        let deep = json!({"items": {"items": {"items": {"items": {"type": "array"}}}}});
        let deep = Constraint::new("guided_json", Kind::Json(deep));
        assert_eq!(
            c.compile(&deep).unwrap_err().to_string(),
            "guided_json must nest at most 4 levels deep."
        );
    }

    /// Whether `k`'s grammar accepts `text` whole (one token per byte).
    fn accepts(c: &GrammarCompiler, k: &Constraint, text: &str) -> bool {
        let g: TopLevelGrammar = serde_json::from_str(&c.compile(k).unwrap()).unwrap();
        let parser = c.factory.create_parser_from_init_ext(
            GrammarInit::Serialized(g),
            Logger::new(0, 0),
            InferenceCapabilities::default(),
            c.limits(),
        );
        let mut m = Matcher::new(parser);
        let toks: Vec<u32> = text.bytes().map(u32::from).collect();
        m.consume_tokens(&toks).is_ok() && m.is_accepting().unwrap_or(false)
    }

    #[test]
    fn a_reasoning_span_may_precede_the_constrained_part() {
        let c = compiler(StructuredOptions::default());
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}},
                            "required": ["a"], "additionalProperties": false});
        let body = json!({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "x", "schema": schema}}});
        let mut k = constraint(body).unwrap().unwrap();
        let json = "{\"a\": 1}";
        assert!(accepts(&c, &k, json) && !accepts(&c, &k, "x</think>{\"a\": 1}"));
        k.after_reasoning = Some(ReplyStart::Reasoning);
        for text in [
            "</think>{\"a\": 1}",
            "<think>\nplan: {a}\n</think>\n{\"a\": 1}",
        ] {
            assert!(accepts(&c, &k, text), "{text}");
        }
        // The span ends at its first `</think>`; without it nothing is constrained yet.
        assert!(!accepts(&c, &k, json) && !accepts(&c, &k, "a</think>b</think>{\"a\": 1}"));
        k.after_reasoning = Some(ReplyStart::Content);
        for (text, ok) in [
            (json, true),
            ("<think>p</think>{\"a\": 1}", true),
            ("p</think>{}", false),
        ] {
            assert_eq!(accepts(&c, &k, text), ok, "{text}");
        }
        // A span the prompt closed: the constraint from the first token.
        k.after_reasoning = Some(ReplyStart::Closed);
        assert!(accepts(&c, &k, json) && !accepts(&c, &k, "<think>p</think>{\"a\": 1}"));
    }

    #[test]
    fn tool_grammars_accept_their_parsers_format() {
        use crate::tools::parsers::{parse_whole, ToolFormat};
        let c = compiler(StructuredOptions::default());
        let tools = json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "required": ["city", "unit"], "properties": {
                    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}}}},
            {"type": "function", "function": {"name": "now"}},
        ]);
        let want = vec![
            ("get_weather".to_string(), String::new()),
            ("now".to_string(), String::new()),
        ];
        for (format, good, bad) in [
            (
                ToolFormat::Hermes,
                "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\
                 \"unit\":\"c\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"now\",\
                 \"arguments\":{}}\n</tool_call>",
                "<tool_call>\n{\"name\":\"nope\",\"arguments\":{}}\n</tool_call>",
            ),
            (
                ToolFormat::Llama3Json,
                "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Paris\",\"unit\":\"c\"}}; \
                 {\"name\":\"now\",\"parameters\":{}}",
                "{\"name\":\"now\",\"parameters\":{\"extra\":1}}",
            ),
            (
                ToolFormat::Mistral,
                "[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\
                 \"unit\":\"c\"}}, {\"name\":\"now\",\"arguments\":{}}]",
                "[TOOL_CALLS][]",
            ),
            (
                ToolFormat::Pythonic,
                "[get_weather(city=\"Paris\", unit=\"c\"), now()]",
                "[get_weather(city=\"Paris\", unit=\"x\")]",
            ),
        ] {
            let opts = crate::tools::ToolOptions::new(Some(format.name()), true).unwrap();
            let plan = crate::tools::plan(&opts, Some(&tools), Some(&json!("required")), None)
                .unwrap()
                .unwrap();
            let k = plan.constraint.unwrap();
            assert!(accepts(&c, &k, good), "{format:?} refuses {good}");
            assert!(!accepts(&c, &k, bad), "{format:?} allows {bad}");
            let names: Vec<(String, String)> = parse_whole(format, good)
                .calls
                .into_iter()
                .map(|(n, _)| (n, String::new()))
                .collect();
            assert_eq!(names, want, "{format:?}");
        }
    }

    /// A format; outputs accepted, with the calls read from them; outputs refused; outputs
    /// with two calls.
    type AutoCase<'a> = (
        crate::tools::parsers::ToolFormat,
        Vec<(String, Vec<&'a str>)>,
        Vec<String>,
        Vec<String>,
    );

    #[test]
    fn auto_grammars_shape_only_the_calls_of_strict_tools() {
        use crate::tools::parsers::{parse_whole, ToolFormat};
        let c = compiler(StructuredOptions::default());
        let tools = json!([
            {"type": "function", "function": {"name": "get_weather", "strict": true,
                "parameters": {"type": "object", "required": ["city", "unit"], "properties": {
                    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}}}},
            {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
                "properties": {"tz": {"type": "string"}}}}},
        ]);
        let weather = r#"{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}"#;
        let bad_unit = r#"{"name":"get_weather","arguments":{"city":"Paris","unit":"x"}}"#;
        let now = r#"{"name":"now","arguments":{"tz":"UTC","extra":1}}"#;
        let nope = r#"{"name":"nope","arguments":{}}"#;
        let hermes = |call: &str| format!("<tool_call>\n{call}\n</tool_call>");
        let llama = |call: &str| call.replace("arguments", "parameters");
        let mistral = |calls: &[&str]| format!("[TOOL_CALLS][{}]", calls.join(", "));
        // (format, accepted outputs and the calls read from them, refused outputs), with
        // `parallel_tool_calls` true; then the outputs with two calls, refused without it.
        let cases: Vec<AutoCase> = vec![
            (
                ToolFormat::Hermes,
                vec![
                    ("It is sunny <b>today</b>.".into(), vec![]),
                    (
                        format!("Let me look.\n{}", hermes(weather)),
                        vec!["get_weather"],
                    ),
                    (hermes(now), vec!["now"]),
                ],
                vec![
                    hermes(bad_unit),
                    hermes(nope),
                    format!("x {}", hermes("{}")),
                ],
                vec![format!("{}\n{}", hermes(weather), hermes(now))],
            ),
            (
                ToolFormat::Mistral,
                vec![
                    ("Sunny [mostly].".into(), vec![]),
                    (
                        format!("Checking. {}", mistral(&[weather])),
                        vec!["get_weather"],
                    ),
                    (mistral(&[now]), vec!["now"]),
                ],
                vec![mistral(&[bad_unit]), mistral(&[nope]), mistral(&[])],
                vec![mistral(&[weather, now])],
            ),
            (
                ToolFormat::Llama3Json,
                vec![
                    ("It is {warm} today.".into(), vec![]),
                    (llama(weather), vec!["get_weather"]),
                    (format!("<|python_tag|>{}", llama(now)), vec!["now"]),
                ],
                vec![llama(bad_unit), llama(nope), format!(" {}", llama(weather))],
                vec![format!(
                    "{}; {}",
                    llama(weather),
                    llama(r#"{"name":"now","arguments":{}}"#)
                )],
            ),
            (
                ToolFormat::Pythonic,
                vec![
                    ("Sunny [mostly].".into(), vec![]),
                    (
                        r#"[get_weather(city="Paris", unit="c")]"#.into(),
                        vec!["get_weather"],
                    ),
                    (r#"[now(tz="UTC")]"#.into(), vec!["now"]),
                ],
                vec![
                    r#"[get_weather(city="Paris", unit="x")]"#.into(),
                    r#"[nope()]"#.into(),
                    r#"  [now(tz="UTC")]"#.into(),
                ],
                vec![r#"[get_weather(city="Paris", unit="f"), now(tz="UTC")]"#.into()],
            ),
        ];
        for (format, good, bad, two) in cases {
            let opts = crate::tools::ToolOptions::new(Some(format.name()), true).unwrap();
            let plan = |parallel| {
                crate::tools::plan(&opts, Some(&tools), None, Some(parallel))
                    .unwrap()
                    .unwrap()
            };
            let p = plan(true);
            assert!(!p.forced);
            let k = p.constraint.unwrap();
            assert_eq!(k.param, "tools");
            for (text, calls) in &good {
                assert!(accepts(&c, &k, text), "{format:?} refuses {text}");
                let read: Vec<String> = parse_whole(format, text)
                    .calls
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect();
                assert_eq!(read, *calls, "{format:?}: {text}");
            }
            for text in &bad {
                assert!(!accepts(&c, &k, text), "{format:?} allows {text}");
            }
            let one = plan(false).constraint.unwrap();
            for text in &two {
                assert!(accepts(&c, &k, text), "{format:?} refuses {text}");
                assert!(
                    !accepts(&c, &one, text),
                    "{format:?} allows two calls: {text}"
                );
                assert_eq!(
                    parse_whole(format, text).calls.len(),
                    2,
                    "{format:?}: {text}"
                );
            }
            assert!(accepts(&c, &one, &good[1].0), "{format:?}");
        }
        // Without a strict tool, `auto` constrains nothing.
        let loose = json!([{"type": "function", "function": {"name": "now"}}]);
        let opts = crate::tools::ToolOptions::new(Some("hermes"), true).unwrap();
        let p = crate::tools::plan(&opts, Some(&loose), None, None)
            .unwrap()
            .unwrap();
        assert!(p.constraint.is_none());
    }

    #[test]
    fn options_shape_the_json_grammar() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "object"}}});
        let mut k = constraint(json!({"structured_outputs": {"json": schema,
            "disable_any_whitespace": true, "disable_additional_properties": true}}))
        .unwrap()
        .unwrap();
        let g: Value =
            serde_json::from_str(&compiler(StructuredOptions::default()).compile(&k).unwrap())
                .unwrap();
        let s = &g["grammars"][0]["json_schema"];
        assert_eq!(s["x-guidance"], json!({"whitespace_flexible": false}));
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["properties"]["a"]["additionalProperties"], json!(false));
        k.disable_additional_properties = None;
        k.disable_any_whitespace = None;
        let g: Value =
            serde_json::from_str(&compiler(StructuredOptions::default()).compile(&k).unwrap())
                .unwrap();
        assert_eq!(
            g["grammars"][0]["json_schema"]["x-guidance"],
            json!({"whitespace_flexible": true})
        );
        assert!(StructuredOptions::parse(r#"{"backend": "xgrammar"}"#).is_err());
        assert!(StructuredOptions::parse(r#"{"typo": 1}"#).is_err());
        assert_eq!(
            StructuredOptions::parse("").unwrap(),
            StructuredOptions::default()
        );
    }
}
