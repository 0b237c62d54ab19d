//! OpenAI's Responses API over HTTP (the rules and the events are the core's:
//! `hybridllm_api::responses`): POST /v1/responses, and the stored responses: GET and DELETE
//! /v1/responses/{response_id}, GET /v1/responses/{response_id}/input_items, and a
//! background response's task (`background: true`) and its cancel.
use super::aggregate::collect;
use super::generate::generate_many;
use super::prompt::{compile_constraint, tokenize};
use super::request::JsonBody;
use super::sse::sse_events_response;
use super::text_deltas::GenEvent;
use crate::errors::{ApiError, HttpError};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::{FutureExt, StreamExt};
use hybridllm_api::responses::input::ResponsesRequest;
use hybridllm_api::responses::{self as core, ResponsesCall, ResponsesResponse};
use std::collections::HashMap;
use std::sync::Arc;

/// Who may see a stored response (the core's rule).
fn owner(state: &AppState, headers: &HeaderMap) -> Option<String> {
    let header = headers.get("authorization").and_then(|h| h.to_str().ok());
    state.auth.owner(header).map(str::to_string)
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<ResponsesRequest>,
) -> Result<Response, HttpError> {
    let owner = owner(&state, &headers);
    let call = ResponsesCall::new(&state.api, req, &state.responses, owner)?;
    let call = compile_constraint(&state, call).await?;
    // With `auto` truncation the oldest turns are dropped until the prompt fits.
    let mut first = 0;
    let (ids, max_tokens) = loop {
        let prompt = call.prompt(&state.api, first)?;
        let ids = tokenize(&state, prompt, false).await?;
        match call.fit(&state.api, first, ids.len())? {
            Some(m) => break (ids, m),
            None => first += 1,
        }
    };
    let prompt_len = ids.len();
    let background = call.background();
    let (gen, mut resp) = call.plan(&state.api, ids, max_tokens)?;
    if background {
        let body = resp.queued(&state.responses);
        run_in_background(state, gen, resp, prompt_len);
        return Ok(json_body(body));
    }
    let events = generate_many(state.clone(), vec![gen]).await?;
    if resp.stream {
        return Ok(stream_response(state, events, resp));
    }
    let c = collect(events, 1, vec![prompt_len], &state.api.tokenizer).await?;
    Ok(json_body(resp.body(c, &state.responses)))
}

/// A background response's task: its request run as one not streamed, its stored object
/// moved from queued to in_progress to its end (or failed); registered so that a cancel can
/// abort it. The registry's lock is held while the task is spawned and registered, so the
/// task's own removal comes after.
fn run_in_background(
    state: Arc<AppState>,
    gen: hybridllm_api::validation::GenRequest,
    mut resp: ResponsesResponse,
    prompt_len: usize,
) {
    let id = gen.request_id.clone();
    let key = resp_id(&resp);
    let mut tasks = state.background.lock().unwrap_or_else(|e| e.into_inner());
    let st = state.clone();
    let task = tokio::spawn(async move {
        let run = async {
            let events = generate_many(st.clone(), vec![gen]).await?;
            resp.started(&st.responses);
            collect(events, 1, vec![prompt_len], &st.api.tokenizer).await
        };
        match run.await {
            Ok(c) => {
                resp.body(c, &st.responses);
            }
            Err(e) => {
                tracing::warn!(request_id = %id, "background response failed: {e}");
                resp.failed(&st.responses, &e);
            }
        }
        st.background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&resp_id(&resp));
    });
    tasks.insert(key, task.abort_handle());
}

fn resp_id(resp: &ResponsesResponse) -> String {
    resp.id().to_string()
}

/// POST /v1/responses/{response_id}/cancel: the core's rule, then its task aborted.
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let owner = owner(&state, &headers);
    let body = core::cancel(&state.responses, &id, owner.as_deref())?;
    let task = state
        .background
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
    if let Some(task) = task {
        task.abort();
    }
    Ok(json_body(body))
}

/// The named events: what is ready joins the events not yet sent; before waiting, they go out.
fn stream_response(
    state: Arc<AppState>,
    events: impl futures_util::Stream<Item = Result<(usize, GenEvent), ApiError>> + Send + 'static,
    mut resp: ResponsesResponse,
) -> Response {
    let s = async_stream::stream! {
        resp.opening();
        let mut events = std::pin::pin!(events);
        loop {
            let next = match events.next().now_or_never() {
                Some(next) => next,
                None => {
                    if let Some(b) = resp.take() {
                        yield b;
                    }
                    events.next().await
                }
            };
            let Some(ev) = next else { break };
            match ev {
                Err(e) => {
                    tracing::warn!("stream failed: {e}");
                    yield resp.error(&e);
                    return;
                }
                Ok((p, ev)) => resp.event(p, &ev),
            }
        }
        yield resp.closing(&state.responses);
    };
    sse_events_response(s)
}

pub async fn retrieve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, HttpError> {
    let owner = owner(&state, &headers);
    core::check_retrieve_query(q.get("stream").map(String::as_str))?;
    Ok(json_body(core::retrieve(
        &state.responses,
        &id,
        owner.as_deref(),
    )?))
}

/// An `application/json` body of an already serialized object.
fn json_body(raw: String) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        raw,
    )
        .into_response()
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let owner = owner(&state, &headers);
    let gone = core::delete(&state.responses, &id, owner.as_deref())?;
    Ok(axum::Json(gone).into_response())
}

pub async fn input_items(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, HttpError> {
    let owner = owner(&state, &headers);
    let get = |k: &str| q.get(k).map(String::as_str);
    let page = core::input_items(
        &state.responses,
        &id,
        owner.as_deref(),
        get("order"),
        get("limit"),
        get("after"),
    )?;
    Ok(axum::Json(page).into_response())
}

#[cfg(test)]
mod tests;
