//! Every generate request of this frontend on one long-lived GenerateStream call.
//!
//! A call per request costs the Python worker a gRPC message per token per request; on one
//! shared call the worker sends one message per engine step carrying every request's delta.
//! Requests queued while the previous message was being written go out together. The call
//! is opened on first use and again after it ends (worker restart, drain).
//!
//! Each request's responses wait in a bounded buffer until its handler takes them; a stream
//! whose client stopped reading stops being polled, and once `STREAM_BUFFER` responses are
//! waiting the request is aborted in the worker and its stream ends with an error.
use crate::engine::{EmbedResult, Engine, StepStream};
use crate::engine_client::{pb, EngineClient};
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use hybridllm_api::engine_io::{EmbedRequest, EngineError, GenerateRequest};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use tokio::sync::mpsc;
use tonic::Status;

/// A response, or the error that ends the request (a refusal, the call's end, an overflow).
type Delivery = Result<pb::GenerateResponse, EngineError>;

/// Engine responses (one per step) a request may have waiting unread; one more slot is kept
/// for the error that ends an overflowing stream.
pub const STREAM_BUFFER: usize = 1024;

#[derive(Debug, PartialEq)]
enum Outgoing {
    Generate(Box<pb::GenerateRequest>),
    Embed(Box<pb::EmbedRequest>),
    Abort(String),
}

struct Call {
    outbox: mpsc::UnboundedSender<Outgoing>,
    /// Where each running request's responses go; `None` once the call has ended.
    routes: Mutex<Option<HashMap<String, mpsc::Sender<Delivery>>>>,
}

impl Call {
    /// A call with no requests yet, and the receiving end of what it will send.
    fn new() -> (Arc<Call>, mpsc::UnboundedReceiver<Outgoing>) {
        let (outbox, inbox) = mpsc::unbounded_channel();
        let call = Arc::new(Call {
            outbox,
            routes: Mutex::new(Some(HashMap::new())),
        });
        (call, inbox)
    }

    /// Routes the responses for `request_id` to a new stream; None once the call has ended.
    fn route(self: &Arc<Self>, request_id: &str) -> Option<RequestStream> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER + 1);
        self.routes
            .lock()
            .unwrap()
            .as_mut()?
            .insert(request_id.to_string(), tx);
        Some(RequestStream {
            rx,
            call: self.clone(),
            request_id: request_id.to_string(),
            finished: false,
        })
    }

    fn dispatch(&self, batch: pb::GenerateStreamResponse) {
        let mut routes = self.routes.lock().unwrap();
        let Some(routes) = routes.as_mut() else {
            return;
        };
        for resp in batch.responses {
            // No route: the request was aborted here and the worker had already produced this.
            let Some(route) = routes.get(&resp.request_id) else {
                continue;
            };
            let id = resp.request_id.clone();
            // The last slot is only ever taken by a final response or the overflow error.
            if resp.finished || route.capacity() > 1 {
                let finished = resp.finished;
                let _ = route.try_send(Ok(resp));
                if finished {
                    routes.remove(&id);
                }
            } else {
                let _ = route.try_send(Err(EngineError::Cancelled(format!(
                    "request aborted: its client read none of its last {STREAM_BUFFER} responses"
                ))));
                routes.remove(&id);
                tracing::warn!(
                    "request {id} aborted: its client read none of its last {STREAM_BUFFER} \
                     responses"
                );
                let _ = self.outbox.send(Outgoing::Abort(id));
            }
        }
    }

    fn fail(&self, status: Status) {
        let error = crate::engine_client::from_status(status);
        let routes = self.routes.lock().unwrap().take();
        for (_, route) in routes.into_iter().flatten() {
            let _ = route.try_send(Err(error.clone())); // the last slot is free
        }
    }
}

/// The next message of the call: everything queued by the time the transport asks for it.
/// None when the mux is gone (nothing more will be queued).
async fn next_message(
    inbox: &mut mpsc::UnboundedReceiver<Outgoing>,
) -> Option<pb::GenerateStreamRequest> {
    let mut msg = pb::GenerateStreamRequest::default();
    let mut next = inbox.recv().await;
    while let Some(item) = next {
        match item {
            Outgoing::Generate(r) => msg.generate.push(*r),
            Outgoing::Embed(r) => msg.embed.push(*r),
            Outgoing::Abort(id) => msg.abort.push(id),
        }
        next = inbox.try_recv().ok();
    }
    let empty = msg.generate.is_empty() && msg.abort.is_empty() && msg.embed.is_empty();
    (!empty).then_some(msg)
}

pub struct EngineMux {
    client: EngineClient,
    call: Mutex<Option<Arc<Call>>>,
}

impl EngineMux {
    pub fn new(client: EngineClient) -> Self {
        Self {
            client,
            call: Mutex::new(None),
        }
    }

    /// Sends the request; its responses arrive on the returned stream.
    pub fn submit(&self, req: pb::GenerateRequest) -> RequestStream {
        let rid = req.request_id.clone();
        self.send(&rid, Outgoing::Generate(Box::new(req)))
    }

    /// Routes `request_id`'s responses to a new stream, then sends `item` on the call.
    fn send(&self, request_id: &str, item: Outgoing) -> RequestStream {
        let stream = loop {
            // None: the call ended just now; the next current_call opens a new one.
            if let Some(stream) = self.current_call().route(request_id) {
                break stream;
            }
        };
        // Cannot fail while routes is Some: the outbox lives until the call has ended.
        let _ = stream.call.outbox.send(item);
        stream
    }

    fn current_call(&self) -> Arc<Call> {
        let mut slot = self.call.lock().unwrap();
        if let Some(call) = slot.as_ref() {
            if call.routes.lock().unwrap().is_some() {
                return call.clone();
            }
        }
        let call = self.open();
        *slot = Some(call.clone());
        call
    }

    fn open(&self) -> Arc<Call> {
        let (call, inbox) = Call::new();
        let requests = futures_util::stream::unfold(inbox, |mut inbox| async move {
            next_message(&mut inbox).await.map(|msg| (msg, inbox))
        });
        let mut client = self.client.clone();
        let this = call.clone();
        tokio::spawn(async move {
            let status = match client.generate_stream(requests).await {
                Ok(resp) => {
                    let mut stream = resp.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(batch)) => this.dispatch(batch),
                            Ok(None) => {
                                break Status::unavailable("the engine ended the generate stream")
                            }
                            Err(status) => break status,
                        }
                    }
                }
                Err(status) => status,
            };
            tracing::debug!("engine generate stream ended: {status}");
            this.fail(status);
        });
        call
    }
}

impl Engine for EngineMux {
    fn generate(&self, req: GenerateRequest) -> StepStream {
        Box::pin(self.submit(req.into()).map(|r| r.map(Into::into)))
    }

    /// On the same call as generate requests, answered by one response: a unary call per
    /// request would cost the Python worker a gRPC call each.
    fn embed(&self, req: EmbedRequest) -> BoxFuture<'static, EmbedResult> {
        let rid = req.request_id.clone();
        let mut stream = self.send(&rid, Outgoing::Embed(Box::new(req.into())));
        Box::pin(async move {
            match stream.next().await {
                Some(resp) => resp.map(|r| r.embeddings.into_iter().map(|e| e.values).collect()),
                None => Err(unavailable()),
            }
        })
    }
}

fn unavailable() -> EngineError {
    EngineError::Unavailable("the engine generate stream ended".into())
}

/// One request's responses. Dropped before the engine finished it (client gone, stop
/// string matched), it aborts the request in the worker.
pub struct RequestStream {
    rx: mpsc::Receiver<Delivery>,
    call: Arc<Call>,
    request_id: String,
    finished: bool,
}

impl Stream for RequestStream {
    type Item = Delivery;

    /// Ends after the last response. A refused request is an error carrying the worker's
    /// refusal (its `rejected` code, message and param).
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        if self.finished {
            return Poll::Ready(None);
        }
        let delivery = ready!(self.rx.poll_recv(cx)).unwrap_or_else(|| Err(unavailable()));
        self.finished = delivery.as_ref().map_or(true, |resp| resp.finished);
        Poll::Ready(Some(delivery.and_then(|resp| match resp.rejected {
            Some(e) => Err(e.into()),
            None => Ok(resp),
        })))
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        let mut routes = self.call.routes.lock().unwrap();
        let running = routes
            .as_mut()
            .is_some_and(|r| r.remove(&self.request_id).is_some());
        if running {
            let _ = self
                .call
                .outbox
                .send(Outgoing::Abort(std::mem::take(&mut self.request_id)));
        }
    }
}

#[cfg(test)]
mod tests;
