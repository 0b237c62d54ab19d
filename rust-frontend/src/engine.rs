//! What the HTTP side needs from the engine worker: generate (start a request and read its
//! steps) and embed, in the core's types (`hybridllm_api::engine_io`). `EngineRouter` implements
//! it over gRPC (protobuf stays in the engine client); tests implement it with scripted steps.
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use hybridllm_api::engine_io::{EmbedRequest, EngineError, EngineStep, GenerateRequest};

/// One request's steps, in order; the stream ends after the one marked `finished`. An error
/// ends it too (a refused request is an error naming the worker's reason).
pub type StepStream = BoxStream<'static, Result<EngineStep, EngineError>>;

/// An embedding request's vectors (one per input, in input order), or the worker's refusal.
pub type EmbedResult = Result<Vec<Vec<f32>>, EngineError>;

pub trait Engine: Send + Sync {
    /// Starts the request. Dropping the stream before its last step aborts the request in
    /// the worker (client gone, stop string matched).
    fn generate(&self, req: GenerateRequest) -> StepStream;

    /// The embeddings of the request's inputs, in input order. Dropping the future before
    /// it is ready aborts the request, which frees the inputs that have not run yet.
    fn embed(&self, req: EmbedRequest) -> BoxFuture<'static, EmbedResult>;
}
