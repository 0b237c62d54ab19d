//! Hidden `text` subcommands: the frontend's text pipeline driven from stdin/stdout JSON, so
//! Python tests can compare it against transformers/tokenizers without a running server.
use crate::cli::TextCmd;
use hybridllm_api::text::chat_template::{ChatTemplate, RenderInput};
use hybridllm_api::text::detokenizer::IncrementalDetokenizer;
use hybridllm_api::text::tokenizer::{DecodeOpts, Tokenizer};
use serde_json::{json, Value};
use std::io::Read;

fn read_stdin() -> anyhow::Result<Value> {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s)?;
    Ok(serde_json::from_str(&s)?)
}

/// Accepts one object or a list of them; always answers with a list.
fn as_list(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        other => vec![other],
    }
}

pub fn run(cmd: TextCmd) -> anyhow::Result<()> {
    let out = match cmd {
        TextCmd::RenderChat { template } => {
            let src = std::fs::read_to_string(&template)?;
            let t = ChatTemplate::compile(&src).map_err(anyhow::Error::msg)?;
            let mut out = vec![];
            for item in as_list(read_stdin()?) {
                let input: RenderInput = serde_json::from_value(item)?;
                out.push(match t.render(&input) {
                    Ok(p) => json!({ "prompt": p }),
                    Err(e) => json!({ "error": e }),
                });
            }
            Value::Array(out)
        }
        TextCmd::Tokenize {
            tokenizer,
            add_special_tokens,
        } => {
            let tok = Tokenizer::from_file(&tokenizer)?;
            let mut out = vec![];
            for item in as_list(read_stdin()?) {
                let text = item
                    .as_str()
                    .ok_or_else(|| anyhow::anyhow!("expected strings"))?;
                out.push(json!(tok
                    .encode(text, add_special_tokens)
                    .map_err(anyhow::Error::msg)?));
            }
            Value::Array(out)
        }
        TextCmd::DecodePrefixes {
            tokenizer,
            keep_special_tokens,
            no_spaces_between_special_tokens,
        } => {
            let tok = Tokenizer::from_file(&tokenizer)?;
            let opts = DecodeOpts {
                skip_special_tokens: !keep_special_tokens,
                spaces_between_special_tokens: !no_spaces_between_special_tokens,
            };
            let mut out = vec![];
            for item in as_list(read_stdin()?) {
                let ids: Vec<u32> = serde_json::from_value(item)?;
                let mut d = IncrementalDetokenizer::new(&[], opts);
                let mut deltas = vec![];
                for id in &ids {
                    deltas.push(d.push(&tok, &[*id]).map_err(anyhow::Error::msg)?);
                }
                let tail = d.flush(&tok).map_err(anyhow::Error::msg)?;
                let full = tok.decode(&ids, opts).map_err(anyhow::Error::msg)?;
                out.push(json!({ "deltas": deltas, "tail": tail, "full": full }));
            }
            Value::Array(out)
        }
    };
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
