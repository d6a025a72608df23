//! The workload-only scan: the value an infinitely fast server would be asked for inside the window
//! (a closed-loop walk with zero service time).

use crate::deployment::Prices;
use crate::des::{EventQueue, Time};
use crate::replay::{Arrivals, Handle, Protocol, Replay, ReplayConfig};
use crate::score::value;
use serde::Serialize;
use serverbench_workloads::TreeSource;

/// What one seed offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Offer {
    /// Seed.
    pub seed: u64,
    /// Requests sent inside the window.
    pub requests: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Dollar value of those requests at the deployment's prices.
    pub value: f64,
    /// Trees started.
    pub trees: u64,
}

/// The walk found requests that repeat without time passing (no think time anywhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the workload sends more than {0} requests at one instant with zero service time (no think time); the scan is unbounded")]
pub struct Unbounded(pub u64);

/// Walks `source` closed-loop with zero service time for `window_s` seconds.
pub fn scan(
    source: &dyn TreeSource,
    prices: &Prices,
    seed: u64,
    concurrency: u32,
    window_s: f64,
    idle_gap_cap_s: f64,
) -> Result<Offer, Unbounded> {
    const LIMIT: u64 = 1_000_000;
    let cfg = ReplayConfig {
        concurrency,
        idle_gap_cap_ns: Time::from_secs(idle_gap_cap_s).0,
        protocol: Protocol::Cold,
        seed,
        arrivals: Arrivals::Closed,
        agentx: crate::replay::AgentxParams::agentx(),
        window_ns: Time::from_secs(window_s).0,
    };
    let mut replay = Replay::new(source, cfg).expect("a closed loop takes any source");
    let mut queue: EventQueue<Handle> = EventQueue::new();
    let mut ready = Vec::new();
    replay.start(Time::ZERO, &mut ready);
    let window = Time::from_secs(window_s);
    let mut offer = Offer {
        seed,
        ..Offer::default()
    };
    let (mut instant, mut at_instant) = (Time::ZERO, 0u64);
    loop {
        for r in ready.drain(..) {
            queue.schedule(r.at, r.handle).expect("never in the past");
        }
        let Some((t, h)) = queue.pop() else { break };
        if t >= window {
            break;
        }
        if t == instant {
            at_instant += 1;
            if at_instant > LIMIT {
                return Err(Unbounded(LIMIT));
            }
        } else {
            (instant, at_instant) = (t, 1);
        }
        let r = replay.request(h);
        offer.requests += 1;
        offer.input_tokens += r.input_tokens as u64;
        offer.output_tokens += r.output_tokens as u64;
        offer.value += value(prices, r.input_tokens, r.output_tokens);
        replay.complete(h, t, &mut ready);
    }
    offer.trees = replay.trees_started();
    Ok(offer)
}
