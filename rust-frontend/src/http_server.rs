//! The HTTP server around the router (axum-server, on hyper): the listening socket (TCP, or a
//! Unix socket with `--uds`), TLS (rustls) when a certificate and key are given, HTTP/1
//! limits, TCP_NODELAY, a send timeout and graceful shutdown bounded by `shutdown_timeout_s`.
use axum::Router;
use axum_server::accept::Accept;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use axum_server::{Address, Handle};
use std::future::Ready;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tokio::net::{TcpStream, UnixStream};
use tokio_io_timeout::TimeoutStream;

/// Where the server listens.
pub enum Listener {
    Tcp(std::net::TcpListener),
    /// `--uds`: plain HTTP on a Unix socket (no TLS: the socket file's permissions guard it).
    Unix(std::os::unix::net::UnixListener),
}

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

/// Connection timers; `None` disables one.
pub struct Timeouts {
    /// Drain time after SIGTERM.
    pub grace: Duration,
    /// hyper closes a connection whose request head has not fully come in by then (a
    /// slowloris); its timer runs from when the connection waits for a head, so it also
    /// closes a keep-alive connection idle that long between requests.
    pub header_read: Option<Duration>,
    /// A write to the client that makes no progress for this long fails and the connection
    /// is closed (nginx's `send_timeout`): a client that stopped reading its stream. Dropping
    /// the response aborts its request in the engine.
    pub send: Option<Duration>,
}

/// Accepted TCP connections get TCP_NODELAY (else Nagle holds each small SSE chunk until the
/// previous one is acked) and the send timeout. Under TLS it wraps the TCP stream, so a
/// stalled encrypted write times out too.
#[derive(Clone, Copy)]
struct TcpAcceptor {
    send: Option<Duration>,
}

type Conn = Pin<Box<TimeoutStream<TcpStream>>>;

/// A Unix socket's connections get the send timeout (there is no Nagle to turn off).
impl<S> Accept<UnixStream, S> for TcpAcceptor {
    type Stream = Pin<Box<TimeoutStream<UnixStream>>>;
    type Service = S;
    type Future = Ready<std::io::Result<(Self::Stream, S)>>;

    fn accept(&self, stream: UnixStream, service: S) -> Self::Future {
        let mut stream = TimeoutStream::new(stream);
        stream.set_write_timeout(self.send);
        std::future::ready(Ok((Box::pin(stream), service)))
    }
}

impl<S> Accept<TcpStream, S> for TcpAcceptor {
    type Stream = Conn;
    type Service = S;
    type Future = Ready<std::io::Result<(Conn, S)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        std::future::ready(stream.set_nodelay(true).map(|()| {
            let mut stream = TimeoutStream::new(stream);
            stream.set_write_timeout(self.send);
            (Box::pin(stream), service)
        }))
    }
}

/// Time for the error events of streams cut at the drain deadline to reach their clients.
const FLUSH_AFTER_DEADLINE: Duration = Duration::from_millis(500);

/// Serves until SIGTERM/SIGINT, then lets in-flight requests finish for at most
/// `timeouts.grace`.
pub async fn run(
    listener: Listener,
    app: Router,
    tls: Option<RustlsConfig>,
    timeouts: Timeouts,
) -> anyhow::Result<()> {
    let Timeouts {
        grace,
        header_read,
        send,
    } = timeouts;
    let service = app.into_make_service();
    let tcp = TcpAcceptor { send };
    let listener = match listener {
        Listener::Tcp(l) => l,
        Listener::Unix(l) => {
            anyhow::ensure!(
                tls.is_none(),
                "--uds serves plain HTTP: drop --ssl-certfile"
            );
            let handle = drain_on_signal(grace);
            let mut server = axum_server::from_unix(l)?
                .handle(handle)
                .http1_only()
                .acceptor(tcp);
            server
                .http_builder()
                .http1()
                .max_headers(HYPER_MAX_HEADERS)
                .header_read_timeout(header_read);
            server.serve(service).await?;
            tracing::info!("shut down");
            return Ok(());
        }
    };
    let handle: Handle<SocketAddr> = drain_on_signal(grace);
    let server = axum_server::from_tcp(listener)?.handle(handle).http1_only();
    match tls {
        None => {
            let mut server = server.acceptor(tcp);
            server
                .http_builder()
                .http1()
                .max_headers(HYPER_MAX_HEADERS)
                .header_read_timeout(header_read);
            server.serve(service).await?
        }
        Some(config) => {
            let mut server = server.acceptor(RustlsAcceptor::new(config).acceptor(tcp));
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

/// A handle that, on SIGTERM/SIGINT, stops taking connections and drains for `grace`.
fn drain_on_signal<A: Address + Send + 'static>(grace: Duration) -> Handle<A> {
    let handle = Handle::new();
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
    handle
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
