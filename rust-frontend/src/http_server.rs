//! The HTTP server around the router (axum-server, on hyper): the listening socket, TLS
//! (rustls) when a certificate and key are given, HTTP/1 limits, TCP_NODELAY and graceful
//! shutdown bounded by `shutdown_timeout_s`.
use axum::Router;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use axum_server::Handle;
use std::net::SocketAddr;
use std::time::Duration;

/// hyper answers more header fields than this with its own bare 431; up to it, `limits.rs`
/// answers with an OpenAI error body (its limit is lower).
const HYPER_MAX_HEADERS: usize = 512;

pub struct Tls {
    pub certfile: String,
    pub keyfile: String,
}

/// Loads the certificate and key now, so that a bad one fails start-up with a clear message.
pub async fn tls_config(tls: &Tls) -> anyhow::Result<RustlsConfig> {
    RustlsConfig::from_pem_file(&tls.certfile, &tls.keyfile)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot load --ssl-certfile {} / --ssl-keyfile {}: {e}",
                tls.certfile,
                tls.keyfile
            )
        })
}

/// Time for the error events of streams cut at the drain deadline to reach their clients.
const FLUSH_AFTER_DEADLINE: Duration = Duration::from_millis(500);

/// Serves until SIGTERM/SIGINT, then lets in-flight requests finish for at most `grace`.
/// `header_read`: hyper closes a connection whose request head has not fully come in by then
/// (a slowloris); its timer runs from when the connection waits for a head, so it also
/// closes a keep-alive connection idle that long between requests.
pub async fn run(
    listener: std::net::TcpListener,
    app: Router,
    tls: Option<RustlsConfig>,
    grace: Duration,
    header_read: Option<Duration>,
) -> anyhow::Result<()> {
    let handle: Handle<SocketAddr> = Handle::new();
    let on_signal = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: no new connections, draining in-flight requests");
        // At `grace` the streams still open end with an error event (shutdown.rs); the
        // connections are closed a moment later, once those events are written.
        on_signal.graceful_shutdown(Some(grace + FLUSH_AFTER_DEADLINE));
        tokio::time::sleep(grace).await;
        crate::shutdown::deadline_passed();
    });
    let service = app.into_make_service();
    let server = axum_server::from_tcp(listener)?.handle(handle).http1_only();
    // Without TCP_NODELAY, Nagle holds each small SSE chunk until the previous one is acked.
    match tls {
        None => {
            let mut server = server.acceptor(NoDelayAcceptor::new());
            server
                .http_builder()
                .http1()
                .max_headers(HYPER_MAX_HEADERS)
                .header_read_timeout(header_read);
            server.serve(service).await?
        }
        Some(config) => {
            let acceptor = RustlsAcceptor::new(config).acceptor(NoDelayAcceptor::new());
            let mut server = server.acceptor(acceptor);
            server
                .http_builder()
                .http1()
                .max_headers(HYPER_MAX_HEADERS)
                .header_read_timeout(header_read);
            server.serve(service).await?
        }
    }
    tracing::info!("shut down");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}
