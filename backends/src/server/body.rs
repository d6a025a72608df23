//! Reading a request's body within bounds: its size (a prompt of the whole context, `params::body_limit`),
//! its time (`--body-timeout`), and the bytes all requests may hold at once (`BodyBudget`). A body cut
//! short is a 400 that says so, never a 413; parsing it is the caller's, off the async workers.

use super::params::Refusal;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of request bodies all requests may hold at once (being read or parsed), counted in KiB.
/// Eight 17 MB bodies at once took 753 MB before there was one: a body waits for its share instead.
pub(super) struct BodyBudget {
    kib: Arc<Semaphore>,
    total: usize,
}

/// The least budget: 64 MiB, so that hundreds of ordinary prompts (30K tokens, ~200 KB each) are read
/// at once without waiting.
const MIN_BUDGET: usize = 64 << 20;

impl BodyBudget {
    /// A budget for bodies of at most `limit` bytes each: two of the largest, and at least 64 MiB.
    pub(super) fn new(limit: usize) -> BodyBudget {
        let total = limit.saturating_mul(2).max(MIN_BUDGET);
        BodyBudget {
            kib: Arc::new(Semaphore::new(kib(total) as usize)),
            total,
        }
    }

    /// The budget, bytes.
    pub(super) fn total(&self) -> usize {
        self.total
    }
}

/// `bytes` in KiB, rounded up (at least 1: every body holds a share while it is read).
fn kib(bytes: usize) -> u32 {
    bytes.div_ceil(1024).clamp(1, u32::MAX as usize) as u32
}

/// A body read whole, holding its share of the budget until it is dropped (after the parse).
pub(super) struct Body {
    pub(super) bytes: Vec<u8>,
    _share: OwnedSemaphorePermit,
}

/// Reads `req`'s body: at most `limit` bytes (413 past it, before reading when `Content-Length` says
/// so), within `timeout` (408, or 503 when the time went waiting for the budget), whole (400 when the
/// connection ends or breaks before the last byte).
pub(super) async fn read(
    req: Request,
    limit: usize,
    timeout: Duration,
    budget: &BodyBudget,
    context_limit: u32,
) -> Result<Body, Refusal> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is larger than {limit} bytes, the most a prompt of the context limit ({context_limit} tokens) needs"
            ),
        )
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let declared = declared.map(|n| n as usize);
    let mut waited = true;
    let reading = async {
        // A body of unknown length (chunked) starts with 64 KiB and takes more as it grows.
        let first = declared.unwrap_or(64 << 10);
        let mut share = budget
            .kib
            .clone()
            .acquire_many_owned(kib(first))
            .await
            .expect("the budget is never closed");
        waited = false;
        let mut bytes = Vec::with_capacity(declared.unwrap_or(0));
        let mut stream = req.into_body().into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| cut_off(bytes.len(), declared, &e.to_string()))?;
            if bytes.len() + chunk.len() > limit {
                return Err(too_large());
            }
            let need = kib(bytes.len() + chunk.len());
            if need as usize > share.num_permits() {
                let more = need - share.num_permits() as u32;
                share.merge(
                    budget
                        .kib
                        .clone()
                        .acquire_many_owned(more)
                        .await
                        .expect("the budget is never closed"),
                );
            }
            bytes.extend_from_slice(&chunk);
        }
        if let Some(n) = declared.filter(|&n| bytes.len() < n) {
            return Err(cut_off(bytes.len(), Some(n), "the body ended early"));
        }
        Ok(Body {
            bytes,
            _share: share,
        })
    };
    let result = tokio::time::timeout(timeout, reading).await;
    match result {
        Ok(read) => read,
        Err(_) if waited => Err(Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the server is holding {} MiB of other requests' bodies; this one waited {} s for its turn",
                budget.total() >> 20,
                timeout.as_secs_f64()
            ),
        )),
        Err(_) => Err(Refusal::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                timeout.as_secs_f64()
            ),
        )),
    }
}

/// A body that ended (the connection closed or broke) before its last byte.
fn cut_off(got: usize, declared: Option<usize>, why: &str) -> Refusal {
    let of = declared.map_or(String::new(), |n| {
        format!(" of the {n} its Content-Length says")
    });
    Refusal::new(
        StatusCode::BAD_REQUEST,
        format!("the request body was cut off after {got} bytes{of}: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_holds_two_of_the_largest_bodies_and_at_least_64_mib() {
        assert_eq!(BodyBudget::new(1 << 20).total(), 64 << 20);
        assert_eq!(BodyBudget::new(100 << 20).total(), 200 << 20);
        assert_eq!((kib(0), kib(1), kib(1024), kib(1025)), (1, 1, 1, 2));
    }
}
