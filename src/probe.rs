//! `serverbench calibrate --endpoint`: probes a black-box OpenAI-compatible server and fits what it can.

use crate::cli::CalibrateArgs;
use anyhow::{bail, Result};

/// Probes `url` and writes a profile.
pub fn endpoint_calibrate(_a: &CalibrateArgs, url: &str) -> Result<()> {
    bail!("--endpoint {url}: TEMP")
}
