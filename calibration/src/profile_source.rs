//! Where a profile comes from: a preset's name, or a profile YAML file read here (at most
//! `MAX_DATA_BYTES`). It fits and writes nothing.

use crate::Profile;
use anyhow::{Context, Result};
use std::path::Path;

/// A profile preset by name, or a profile YAML file; `flag` names the option in errors.
pub fn profile(flag: &str, name: &str) -> Result<Profile> {
    if let Some(p) = Profile::preset(name) {
        return Ok(p);
    }
    let text = serverbench_config::read_text(Path::new(name), serverbench_config::MAX_DATA_BYTES)
        .with_context(|| format!("{flag}: {name:?} is not a profile preset"))?;
    Ok(Profile::from_yaml(name, &text)?)
}
