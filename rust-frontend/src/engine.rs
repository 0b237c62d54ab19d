//! What the HTTP side needs from the engine worker: generate (start a request and read its
//! responses) and embed. `EngineMux` implements it over gRPC; tests implement it with
//! scripted responses.
use crate::engine_client::pb;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tonic::Status;

/// One request's responses, in order; the stream ends after the one marked `finished`. An
/// error ends it too (a refused request is an error carrying the worker's status).
pub type ResponseStream = BoxStream<'static, Result<pb::GenerateResponse, Status>>;

/// An embedding request's vectors, or the worker's refusal.
pub type EmbedResult = Result<Vec<pb::Embedding>, Status>;

pub trait Engine: Send + Sync {
    /// Starts the request. Dropping the stream before its last response aborts the request
    /// in the worker (client gone, stop string matched).
    fn generate(&self, req: pb::GenerateRequest) -> ResponseStream;

    /// The embeddings of the request's inputs, in input order. Dropping the future before
    /// it is ready aborts the request, which frees the inputs that have not run yet.
    fn embed(&self, req: pb::EmbedRequest) -> BoxFuture<'static, EmbedResult>;
}
