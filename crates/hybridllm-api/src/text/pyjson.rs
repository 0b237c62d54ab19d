//! Python-compatible rendering of template values.
//!
//! Chat templates are written against Jinja2 running in Python, so two Python behaviours leak
//! into prompts: `json.dumps` (transformers' `tojson` filter) and `str()`/`repr()` of values
//! (`{{ some_dict }}`, `x|string`, `{{ none }}`). Both are reproduced here byte for byte.
use minijinja::value::ValueKind;
use minijinja::Value;
use std::fmt::Write;

/// Options of `json.dumps` that transformers' `tojson` forwards.
#[derive(Clone, Debug)]
pub struct DumpOpts {
    pub indent: Option<String>,
    pub ensure_ascii: bool,
    pub sort_keys: bool,
    pub item_sep: String,
    pub key_sep: String,
}

impl Default for DumpOpts {
    fn default() -> Self {
        DumpOpts {
            indent: None,
            ensure_ascii: false,
            sort_keys: false,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
        }
    }
}

/// Python `float.__repr__`: shortest round-trip digits, exponent form outside [1e-4, 1e16).
pub fn py_float(f: f64, json: bool) -> String {
    if f.is_nan() {
        return if json { "NaN" } else { "nan" }.into();
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 { format!("-{s}") } else { s.into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let sci = format!("{:e}", f.abs()); // shortest digits, e.g. "1.5e-5"
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let e = exp as usize;
            let (int, frac) = if digits.len() > e + 1 {
                (digits[..e + 1].to_string(), digits[e + 1..].to_string())
            } else {
                (
                    format!("{digits}{}", "0".repeat(e + 1 - digits.len())),
                    "0".into(),
                )
            };
            format!("{sign}{int}.{frac}")
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let es = if exp < 0 { "-" } else { "+" };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    }
}

fn number_str(v: &Value, json: bool) -> String {
    if v.is_integer() {
        v.to_string()
    } else {
        match f64::try_from(v.clone()) {
            Ok(f) => py_float(f, json),
            Err(_) => v.to_string(),
        }
    }
}

/// `json.dumps` string escaping.
pub fn json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", u);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn key_string(k: &Value) -> String {
    match k.kind() {
        ValueKind::String => k.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => if k.is_true() { "true" } else { "false" }.into(),
        ValueKind::None | ValueKind::Undefined => "null".into(),
        ValueKind::Number => number_str(k, true),
        _ => k.to_string(),
    }
}

fn map_entries(v: &Value, sort: bool) -> Vec<(Value, Value)> {
    let mut entries: Vec<(Value, Value)> = v
        .try_iter()
        .map(|it| {
            it.map(|k| {
                let val = v.get_item(&k).unwrap_or_default();
                (k, val)
            })
            .collect()
        })
        .unwrap_or_default();
    if sort {
        entries.sort_by_key(|a| key_string(&a.0));
    }
    entries
}

/// Python `json.dumps(value, ...)`.
pub fn dumps(v: &Value, o: &DumpOpts) -> String {
    let mut out = String::new();
    dump_into(&mut out, v, o, 0);
    out
}

fn newline(out: &mut String, o: &DumpOpts, level: usize) {
    if let Some(ind) = &o.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn dump_into(out: &mut String, v: &Value, o: &DumpOpts, level: usize) {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&number_str(v, true)),
        ValueKind::String => json_str(out, v.as_str().unwrap_or_default(), o.ensure_ascii),
        ValueKind::Map => {
            let entries = map_entries(v, o.sort_keys);
            if entries.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            for (i, (k, val)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, o, level + 1);
                json_str(out, &key_string(k), o.ensure_ascii);
                out.push_str(&o.key_sep);
                dump_into(out, val, o, level + 1);
            }
            newline(out, o, level);
            out.push('}');
        }
        _ => match v.try_iter() {
            Ok(items) => {
                let items: Vec<Value> = items.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&o.item_sep);
                    }
                    newline(out, o, level + 1);
                    dump_into(out, item, o, level + 1);
                }
                newline(out, o, level);
                out.push(']');
            }
            Err(_) => json_str(out, &v.to_string(), o.ensure_ascii),
        },
    }
}

/// Python `repr(str)`.
pub fn py_repr_str(out: &mut String, s: &str) {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(q);
}

/// Python `str(value)`: strings verbatim, everything else as `repr` would show it.
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        ValueKind::Undefined => String::new(),
        _ => {
            let mut out = String::new();
            py_repr_into(&mut out, v);
            out
        }
    }
}

fn py_repr_into(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&number_str(v, false)),
        ValueKind::String => py_repr_str(out, v.as_str().unwrap_or_default()),
        ValueKind::Map => {
            out.push('{');
            for (i, (k, val)) in map_entries(v, false).iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr_into(out, k);
                out.push_str(": ");
                py_repr_into(out, val);
            }
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(items) = v.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr_into(out, &item);
                }
            }
            out.push(']');
        }
        _ => out.push_str(&v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_python() {
        assert_eq!(py_float(1.0, true), "1.0");
        assert_eq!(py_float(0.1, true), "0.1");
        assert_eq!(py_float(1e16, true), "1e+16");
        assert_eq!(py_float(1.5e-5, true), "1.5e-05");
        assert_eq!(py_float(0.0001, true), "0.0001");
        assert_eq!(py_float(123456.789, true), "123456.789");
        assert_eq!(py_float(-2.5, true), "-2.5");
        assert_eq!(py_float(1e15, true), "1000000000000000.0");
    }

    #[test]
    fn dumps_like_python() {
        let v = Value::from_serialize(serde_json::json!(
            {"a": [1, 2.5, "é\"\n"], "b": {}, "c": [], "d": null, "e": true}
        ));
        assert_eq!(
            dumps(&v, &DumpOpts::default()),
            r#"{"a": [1, 2.5, "é\"\n"], "b": {}, "c": [], "d": null, "e": true}"#
        );
        let o = DumpOpts {
            indent: Some("  ".into()),
            item_sep: ",".into(),
            ..Default::default()
        };
        assert_eq!(
            dumps(&v, &o),
            "{\n  \"a\": [\n    1,\n    2.5,\n    \"é\\\"\\n\"\n  ],\n  \"b\": {},\n  \"c\": [],\n  \"d\": null,\n  \"e\": true\n}"
        );
        let o = DumpOpts {
            ensure_ascii: true,
            ..Default::default()
        };
        assert_eq!(dumps(&Value::from("é😀<"), &o), r#""\u00e9\ud83d\ude00<""#);
    }

    #[test]
    fn repr_like_python() {
        let v = Value::from_serialize(serde_json::json!(
            [{"a": "it's", "b": null, "c": false, "d": 1.0, "e": "x'\"y"}]
        ));
        assert_eq!(
            py_str(&v),
            r#"[{'a': "it's", 'b': None, 'c': False, 'd': 1.0, 'e': 'x\'"y'}]"#
        );
    }
}
