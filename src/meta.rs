//! The metadata of every JSON output, filled in now: the binary's version and commit (`build.rs`), the
//! command line, the clock and the deployment's hash. It never reads anything else.

use serverbench_backends::verify::deployment_sha256;
use serverbench_sim::Deployment;
use serverbench_study::report::{DeploymentMeta, Meta};

/// Metadata of an output written now, about `deployment`.
pub fn now(deployment: Option<&Deployment>) -> Meta {
    Meta {
        tool: "serverbench",
        version: env!("CARGO_PKG_VERSION"),
        commit: env!("SERVERBENCH_COMMIT"),
        command: std::env::args().collect(),
        created_utc: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        deployment: deployment.map(|d| DeploymentMeta {
            name: d.name.clone(),
            sha256: deployment_sha256(d),
        }),
        url: None,
        model: None,
    }
}
