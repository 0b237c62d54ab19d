//! Start-up (engine handshake, tokenizer, chat template, TLS files), the axum router and the
//! listening socket (inherited fd or our own bind); `http_server.rs` serves it. Handlers depend on the state
//! (state.rs), never on this module.
use crate::cli::ServeArgs;
use crate::config::ServeConfig;
use crate::engine_client;
use crate::engine_mux::EngineMux;
use crate::engine_router::{EngineRouter, Worker};
use crate::errors::{ApiError, HttpError};
use crate::http_server;
use crate::metrics::Metrics;
use crate::state::AppState;
use axum::Router;
use hybridllm_api::context::ApiContext;
use std::sync::Arc;
use std::time::Duration;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

/// How often each of several engine workers is health-checked for the rotation.
const WORKER_PROBE: Duration = Duration::from_millis(500);

/// An `X-Request-Id` for a request that came without one (the core's).
#[derive(Clone, Copy)]
struct NewRequestId;

impl MakeRequestId for NewRequestId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let id = hybridllm_api::usage::new_request_id();
        axum::http::HeaderValue::from_str(&id)
            .ok()
            .map(RequestId::new)
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    let request_id_headers = state.config.enable_request_id_headers;
    let mut router = Router::new();
    for r in crate::routes::table() {
        if r.path == "/" && state.config.disable_playground {
            continue;
        }
        router = router.route(r.path, r.handler);
    }
    let router = router
        .fallback(|| async { HttpError(ApiError::NotFound("Not Found".into())) })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::require_key,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::cors::apply,
        ))
        .layer(axum::middleware::from_fn(crate::limits::header_limits));
    // Outermost, so every answer carries it (refusals included); a request without one gets
    // a new one first, which the handlers then take as the request's id.
    let router = match request_id_headers {
        true => router
            .layer(PropagateRequestIdLayer::x_request_id())
            .layer(SetRequestIdLayer::x_request_id(NewRequestId)),
        false => router,
    };
    let root = state.config.root_path.clone();
    let router = router.with_state(state);
    match root {
        None => router,
        // Before routing (a layer on the router runs after it): the whole router is the
        // fallback of one that takes the prefix off.
        Some(root) => {
            let strip = axum::middleware::map_request(move |mut req: axum::extract::Request| {
                let root = root.clone();
                async move {
                    let uri = req.uri();
                    if let Some(path) = hybridllm_api::root_path::route_path(&root, uri.path()) {
                        let rest = match uri.query() {
                            Some(q) => format!("{path}?{q}"),
                            None => path.to_string(),
                        };
                        if let Ok(pq) = rest.parse::<axum::http::uri::PathAndQuery>() {
                            let mut parts = uri.clone().into_parts();
                            parts.path_and_query = Some(pq);
                            if let Ok(u) = axum::http::Uri::from_parts(parts) {
                                *req.uri_mut() = u;
                            }
                        }
                    }
                    req
                }
            });
            Router::new().fallback_service(tower::Layer::layer(&strip, router))
        }
    }
}

/// Everything that can fail before serving fails here, with a clear message (exit non-zero).
pub async fn build_state(args: &ServeArgs) -> anyhow::Result<Arc<AppState>> {
    let config = ServeConfig::load(&args.args_json)?;
    let options = config.api_options();
    // Compile an override template first: a broken one must fail even without a worker.
    let override_template = options.override_template()?;
    let clients = args
        .engine_address
        .iter()
        .map(|a| engine_client::connect(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let timeout = Duration::from_secs_f64(config.engine_connect_timeout_s.max(0.0));
    let infos = futures_util::future::try_join_all(
        clients
            .iter()
            .map(|c| engine_client::model_info(c, timeout)),
    )
    .await?;
    let info = infos[0].clone();
    // Data parallelism: replicas of one model, or requests would answer differently.
    if let Some((i, other)) = infos.iter().enumerate().find(|(_, o)| {
        (&o.model_path, o.vocab_size, o.max_model_len, o.kind)
            != (
                &info.model_path,
                info.vocab_size,
                info.max_model_len,
                info.kind,
            )
    }) {
        anyhow::bail!(
            "engine worker {i} ({}) serves {} (max_model_len {}), worker 0 serves {} (max_model_len {}): data-parallel workers must serve the same model",
            args.engine_address[i], other.model_path, other.max_model_len, info.model_path, info.max_model_len
        );
    }
    let api = ApiContext::build(&info.clone().into(), &options, override_template)?;
    for warning in &api.warnings {
        tracing::warn!("{warning}");
    }
    tracing::info!(model = %api.model_name(), max_model_len = api.max_model_len, "engine ready");
    let responses = hybridllm_api::response_store::ResponseStore::new(config.responses_store_size);
    let metrics = Arc::new(Metrics::with_prefix(&config.metrics_prefix));
    let workers = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let label = i.to_string();
            Worker {
                mux: EngineMux::new(c.clone()),
                load: metrics
                    .worker_outstanding_tokens
                    .with_label_values(&[&label]),
                routed: metrics.worker_requests.with_label_values(&[&label]),
                up: {
                    let up = metrics.worker_up.with_label_values(&[&label]);
                    up.set(1);
                    up
                },
            }
        })
        .collect();
    if clients.len() > 1 {
        tracing::info!(workers = clients.len(), routing = ?args.routing, "data parallel");
    }
    let router = Arc::new(EngineRouter::new(workers, args.routing));
    if clients.len() > 1 {
        router.clone().watch(clients.clone(), WORKER_PROBE);
    }
    Ok(Arc::new(AppState {
        auth: crate::state::auth(&config),
        cors: crate::state::cors(&config),
        keep_alive: args.keep_alive,
        engine: router,
        engine_clients: clients,
        api,
        model_path: info.model_path,
        tokenizer_path: info.tokenizer_path,
        metrics,
        responses,
        background: Default::default(),
        created: hybridllm_api::usage::now(),
        config,
    }))
}

/// The parent bound the socket (so the port, or `--uds` path, is reserved before we start);
/// we listen on it.
fn inherited_listener(fd: i32) -> anyhow::Result<http_server::Listener> {
    use std::os::fd::FromRawFd;
    // SAFETY: the fd is handed to us by the parent process for exactly this purpose and is
    // not used anywhere else in this process.
    let socket = unsafe { socket2::Socket::from_raw_fd(fd) };
    socket.listen(2048)?;
    socket.set_nonblocking(true)?;
    Ok(match socket.domain()? {
        socket2::Domain::UNIX => http_server::Listener::Unix(socket.into()),
        _ => http_server::Listener::Tcp(socket.into()),
    })
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Bind (or adopt the inherited socket) before the engine handshake so errors surface early.
    let listener = match args.listen_fd {
        Some(fd) => inherited_listener(fd)?,
        None => {
            let l = std::net::TcpListener::bind((args.host.as_str(), args.port))?;
            l.set_nonblocking(true)?;
            http_server::Listener::Tcp(l)
        }
    };
    let state = build_state(&args).await?;
    let tls = match (&state.config.ssl_certfile, &state.config.ssl_keyfile) {
        (Some(certfile), Some(keyfile)) => Some(
            http_server::tls_config(&http_server::Tls {
                certfile: certfile.clone(),
                keyfile: keyfile.clone(),
            })
            .await?,
        ),
        (None, None) => None,
        _ => anyhow::bail!("--ssl-certfile and --ssl-keyfile go together"),
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    match &listener {
        http_server::Listener::Tcp(l) => {
            tracing::info!("listening on {scheme}://{}", l.local_addr()?)
        }
        http_server::Listener::Unix(l) => {
            tracing::info!("listening on unix:{:?}", l.local_addr()?.as_pathname())
        }
    }
    let grace = Duration::from_secs_f64(state.config.shutdown_timeout_s.max(0.0));
    let enabled = |s: f64| (s > 0.0).then(|| Duration::from_secs_f64(s));
    let timeouts = http_server::Timeouts {
        grace,
        header_read: enabled(state.config.header_read_timeout_s),
        send: enabled(state.config.send_timeout_s),
    };
    http_server::run(listener, router(state), tls, timeouts).await
}
