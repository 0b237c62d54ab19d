//! The route table: every endpoint the router serves, in one list. The router is built from
//! it (server.rs), and `hybridllm-frontend routes` prints it, so that a test can walk the very
//! table the server uses (every route but the open ones must refuse a missing key).
use crate::openai;
use crate::state::AppState;
use axum::http::Method;
use axum::routing::{delete, get, post, MethodRouter};
use std::sync::Arc;

pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub handler: MethodRouter<Arc<AppState>>,
}

fn route(method: Method, path: &'static str, handler: MethodRouter<Arc<AppState>>) -> Route {
    Route {
        method,
        path,
        handler,
    }
}

/// One line per endpoint; add new ones here.
pub fn table() -> Vec<Route> {
    vec![
        route(
            Method::POST,
            "/v1/chat/completions",
            post(openai::chat::handle),
        ),
        route(
            Method::POST,
            "/v1/chat/completions/batch",
            post(openai::chat::handle_batch),
        ),
        route(
            Method::POST,
            "/v1/completions",
            post(openai::completions::handle),
        ),
        route(
            Method::POST,
            "/v1/embeddings",
            post(openai::embeddings::handle),
        ),
        route(Method::POST, "/pooling", post(openai::embeddings::pooling)),
        route(
            Method::POST,
            "/inference/v1/generate",
            post(openai::completions::tokens),
        ),
        route(
            Method::POST,
            "/invocations",
            post(openai::invocations::handle),
        ),
        route(
            Method::POST,
            "/v1/responses",
            post(openai::responses::create),
        ),
        route(
            Method::GET,
            "/v1/responses/{response_id}",
            get(openai::responses::retrieve),
        ),
        route(
            Method::DELETE,
            "/v1/responses/{response_id}",
            delete(openai::responses::delete),
        ),
        route(
            Method::POST,
            "/v1/responses/{response_id}/cancel",
            post(openai::responses::cancel),
        ),
        route(
            Method::GET,
            "/v1/responses/{response_id}/input_items",
            get(openai::responses::input_items),
        ),
        route(Method::GET, "/v1/models", get(openai::models::models)),
        route(Method::GET, "/health", get(openai::models::health)),
        route(Method::GET, "/version", get(openai::models::version)),
        route(Method::GET, "/load", get(openai::models::load)),
        route(Method::GET, "/openapi.json", get(openai::models::openapi)),
        // Open (no key: the page asks for one), unless --disable-playground.
        route(Method::GET, "/", get(openai::models::playground)),
        route(Method::GET, "/metrics", get(openai::models::metrics)),
        route(Method::POST, "/tokenize", post(openai::models::tokenize)),
        route(
            Method::POST,
            "/detokenize",
            post(openai::models::detokenize),
        ),
        route(
            Method::GET,
            "/tokenizer_info",
            get(openai::tokenizer_info::tokenizer_info),
        ),
    ]
}

/// The table as JSON lines `{"method": "GET", "path": "/health"}` (the `routes` command).
pub fn print() {
    for r in table() {
        println!(
            "{}",
            serde_json::json!({"method": r.method.as_str(), "path": r.path})
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_unique_per_method() {
        let t = table();
        let mut seen = std::collections::HashSet::new();
        assert!(t.iter().all(|r| seen.insert((r.method.clone(), r.path))));
        assert!(t.iter().any(|r| r.path == "/health"));
    }

    /// The core's OpenAPI document describes exactly the routes this router is built from.
    #[test]
    fn the_document_describes_every_route() {
        let doc: serde_json::Value =
            serde_json::from_str(hybridllm_api::openapi::document()).unwrap();
        let described: std::collections::BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    .map(move |m| (m.to_uppercase(), path.clone()))
            })
            .collect();
        let served: std::collections::BTreeSet<(String, String)> = table()
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_string()))
            .collect();
        assert_eq!(described, served);
    }
}
