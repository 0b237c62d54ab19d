//! The drain deadline after SIGTERM: in-flight streams get `shutdown_timeout_s` to finish;
//! at the deadline each one still open ends with an error event (and its engine request is
//! aborted) rather than being cut silently when the server closes its connections, and a
//! request whose body is still being collected is answered 503.
use std::sync::OnceLock;
use tokio::sync::watch;

/// The error of a request still running when the drain time after SIGTERM is over.
pub const SHUTDOWN_CUT: &str = "The server is shutting down and this request did not finish \
     within its --shutdown-timeout; it was aborted.";

/// Process-wide, as the signal is: one server per process.
static PASSED: OnceLock<watch::Sender<bool>> = OnceLock::new();

fn passed() -> &'static watch::Sender<bool> {
    PASSED.get_or_init(|| watch::channel(false).0)
}

/// Called once the drain time is over.
pub fn deadline_passed() {
    passed().send_replace(true);
}

/// Resolves when the drain deadline has passed (never while the server runs normally).
pub async fn deadline() {
    until_true(passed().subscribe()).await
}

async fn until_true(mut rx: watch::Receiver<bool>) {
    // The sender is static: it is never dropped, so wait_for only returns Ok.
    let _ = rx.wait_for(|p| *p).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // A local channel: flipping the process-wide one would cut every stream of the other
    // tests running in this binary.
    #[tokio::test]
    async fn resolves_once_passed() {
        let (tx, rx) = watch::channel(false);
        let waiting = tokio::spawn(until_true(rx.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .unwrap()
            .unwrap();
        until_true(rx).await; // already passed: at once
    }
}
