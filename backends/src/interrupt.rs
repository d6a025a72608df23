//! A request to stop, handed to the async code from outside it: the binary turns SIGINT and SIGTERM
//! into [`Interrupt::request`], and the replay, the warm-up, the probe and the server wait on
//! [`Interrupt::requested`]. The library itself installs no signal handler.

use std::sync::Arc;
use tokio::sync::watch;

/// A count of stop requests, shared by clones; the first stops a run or starts a server's drain, the
/// second cuts the drain short.
#[derive(Clone, Debug)]
pub struct Interrupt {
    requests: Arc<watch::Sender<Requests>>,
}

/// How many stop requests came, and why the first came.
#[derive(Clone, Debug, Default)]
struct Requests {
    count: u32,
    why: Option<String>,
}

impl Default for Interrupt {
    fn default() -> Self {
        Interrupt::new()
    }
}

impl Interrupt {
    /// No request yet.
    pub fn new() -> Interrupt {
        Interrupt {
            requests: Arc::new(watch::Sender::new(Requests::default())),
        }
    }

    /// Asks everything waiting on this to stop; `why` (e.g. `SIGTERM`) is kept from the first request.
    /// Callable from any thread, any number of times.
    pub fn request(&self, why: &str) {
        self.requests.send_modify(|r| {
            r.count = r.count.saturating_add(1);
            r.why.get_or_insert_with(|| why.to_string());
        });
    }

    /// How many requests came so far.
    pub fn count(&self) -> u32 {
        self.requests.borrow().count
    }

    /// Why the first request came, once one did.
    pub fn why(&self) -> Option<String> {
        self.requests.borrow().why.clone()
    }

    /// Resolves once at least `n` requests came (at once if they already did).
    pub async fn requests(&self, n: u32) {
        let mut rx = self.requests.subscribe();
        // The sender lives as long as `self`: waiting cannot fail.
        let _ = rx.wait_for(|r| r.count >= n).await;
    }

    /// Resolves once a first request came.
    pub async fn requested(&self) {
        self.requests(1).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_made_before_anyone_waits_is_not_lost() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stop = Interrupt::new();
        stop.clone().request("SIGTERM");
        rt.block_on(stop.requested());
        stop.request("SIGINT");
        rt.block_on(stop.requests(2));
        assert_eq!((stop.count(), stop.why().as_deref()), (2, Some("SIGTERM")));
    }
}
