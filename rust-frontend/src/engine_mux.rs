//! Every generate request of this frontend on one long-lived GenerateStream call.
//!
//! A call per request costs the Python worker a gRPC message per token per request; on one
//! shared call the worker sends one message per engine step carrying every request's delta.
//! Requests queued while the previous message was being written go out together. The call
//! is opened on first use and again after it ends (worker restart, drain).
use crate::engine_client::{pb, EngineClient};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tonic::{Code, Status};

type Delivery = Result<pb::GenerateResponse, Status>;

enum Outgoing {
    Generate(Box<pb::GenerateRequest>),
    Abort(String),
}

struct Call {
    outbox: mpsc::UnboundedSender<Outgoing>,
    /// Where each running request's responses go; `None` once the call has ended.
    routes: Mutex<Option<HashMap<String, mpsc::UnboundedSender<Delivery>>>>,
}

impl Call {
    fn dispatch(&self, batch: pb::GenerateStreamResponse) {
        let mut routes = self.routes.lock().unwrap();
        let Some(routes) = routes.as_mut() else {
            return;
        };
        for resp in batch.responses {
            let route = if resp.finished {
                routes.remove(&resp.request_id)
            } else {
                routes.get(&resp.request_id).cloned()
            };
            // No route: the request was aborted here and the worker had already produced this.
            if let Some(route) = route {
                let _ = route.send(Ok(resp));
            }
        }
    }

    fn fail(&self, status: Status) {
        let routes = self.routes.lock().unwrap().take();
        for (_, route) in routes.into_iter().flatten() {
            let _ = route.send(Err(status.clone()));
        }
    }
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
        let (tx, rx) = mpsc::unbounded_channel();
        let request_id = req.request_id.clone();
        loop {
            let call = self.current_call();
            {
                let mut routes = call.routes.lock().unwrap();
                let Some(routes) = routes.as_mut() else {
                    continue; // it ended just now: open the next one
                };
                routes.insert(request_id.clone(), tx.clone());
            }
            // Cannot fail while routes is Some: the outbox lives until the call has ended.
            let _ = call.outbox.send(Outgoing::Generate(Box::new(req)));
            return RequestStream {
                rx,
                call,
                request_id,
                finished: false,
            };
        }
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
        let (outbox, inbox) = mpsc::unbounded_channel();
        let call = Arc::new(Call {
            outbox,
            routes: Mutex::new(Some(HashMap::new())),
        });
        // Everything queued by the time the transport asks for the next message goes in it.
        let requests = futures_util::stream::unfold(inbox, |mut inbox| async move {
            let mut msg = pb::GenerateStreamRequest::default();
            let mut next = inbox.recv().await;
            while let Some(item) = next {
                match item {
                    Outgoing::Generate(r) => msg.generate.push(*r),
                    Outgoing::Abort(id) => msg.abort.push(id),
                }
                next = inbox.try_recv().ok();
            }
            let empty = msg.generate.is_empty() && msg.abort.is_empty();
            (!empty).then_some((msg, inbox))
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

/// One request's responses. Dropped before the engine finished it (client gone, stop
/// string matched), it aborts the request in the worker.
pub struct RequestStream {
    rx: mpsc::UnboundedReceiver<Delivery>,
    call: Arc<Call>,
    request_id: String,
    finished: bool,
}

impl RequestStream {
    /// The next response; Ok(None) after the last one. A refused request is an error with the
    /// worker's status, as the per-request Generate call would have ended.
    pub async fn message(&mut self) -> Result<Option<pb::GenerateResponse>, Status> {
        if self.finished {
            return Ok(None);
        }
        let delivery = self
            .rx
            .recv()
            .await
            .unwrap_or_else(|| Err(Status::unavailable("the engine generate stream ended")));
        let resp = delivery.inspect_err(|_| self.finished = true)?;
        self.finished = resp.finished;
        match resp.rejected {
            Some(e) => Err(Status::new(Code::from(e.code), e.message)),
            None => Ok(Some(resp)),
        }
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
