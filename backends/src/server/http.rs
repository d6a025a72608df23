//! The server's HTTP side under abuse: a cap on open connections (one over it is closed at once), a
//! timeout for a request's headers (which also closes a connection left idle between requests), and a
//! graceful drain on shutdown that refuses new connections at once and waits for open streams only so
//! long, then ends them with an error. Request bodies are read with their own size limit, timeout and
//! budget by the handlers (`body`).

use crate::interrupt::Interrupt;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// What the server tolerates from its clients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServeLimits {
    /// Connections open at once; a connection over the cap is closed as it is accepted.
    pub max_connections: usize,
    /// Time a client has to send a request's headers; a connection idle this long between requests
    /// is closed too.
    pub header_timeout: Duration,
    /// Time a client has to send a request's body once its headers arrived.
    pub body_timeout: Duration,
    /// On shutdown, how long open requests may take to finish before their connections are closed.
    pub drain_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// What tells open requests that the server stops waiting for them (set once).
pub(super) type Closing = tokio::sync::watch::Sender<bool>;

/// How long requests told to end (`Closing`) have to write their last bytes before the server returns.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// Serves `router` on `listener` until `stop` is requested, then drains: the listener is closed at
/// once (a new connection is refused, where a listener kept open let it hang), open requests may
/// finish for `limits.drain_timeout`, and those still open after it, or after a second request, are
/// ended through `closing` (a stream gets an error event and `data: [DONE]`).
pub(super) async fn serve_router(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ServeLimits,
    stop: &Interrupt,
    closing: Closing,
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: wait a little instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stop.requested() => break,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            drop(tcp); // over the cap
            continue;
        };
        // Token chunks are small writes: without TCP_NODELAY, Nagle's algorithm and delayed ACKs
        // hold them.
        let _ = tcp.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = http.serve_connection(TokioIo::new(tcp), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    tokio::select! {
        _ = &mut drained => return Ok(()),
        _ = tokio::time::sleep(limits.drain_timeout) => {}
        _ = stop.requests(2) => {}
    }
    closing.send_replace(true);
    let _ = tokio::time::timeout(LAST_WORDS, drained).await;
    Ok(())
}
