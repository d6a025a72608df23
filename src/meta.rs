//! What every JSON output says about itself: the tool, its version and commit, the command line, when it
//! ran (UTC), the deployment (its name and the SHA-256 of its resolved YAML) and, for real runs, the
//! server's URL and model. It never reads anything but the clock and the command line.

use serde::Serialize;
use serverbench_backends::verify::deployment_sha256;
use serverbench_sim::Deployment;

/// A JSON output's metadata.
#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    /// `serverbench`.
    pub tool: &'static str,
    /// The crate version.
    pub version: &'static str,
    /// The git commit the binary was built from (`unknown` outside a clone).
    pub commit: &'static str,
    /// The command line, argument by argument.
    pub command: Vec<String>,
    /// When the output was written, UTC (RFC 3339).
    pub created_utc: String,
    /// The deployment the output is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentMeta>,
    /// A real run's server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The model name sent to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Which deployment, exactly.
#[derive(Clone, Debug, Serialize)]
pub struct DeploymentMeta {
    /// Its name.
    pub name: String,
    /// SHA-256 of its resolved YAML (`--print-config`), hex: equal hashes, equal deployments.
    pub sha256: String,
}

impl Meta {
    /// Metadata of an output written now, about `deployment`.
    pub fn now(deployment: Option<&Deployment>) -> Meta {
        Meta {
            tool: "serverbench",
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("SERVERBENCH_COMMIT"),
            command: std::env::args().collect(),
            created_utc: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                .to_string(),
            deployment: deployment.map(|d| DeploymentMeta {
                name: d.name.clone(),
                sha256: deployment_sha256(d),
            }),
            url: None,
            model: None,
        }
    }

    /// The same, for a run against the server at `url` serving `model`.
    pub fn with_server(mut self, url: Option<&str>, model: &str) -> Meta {
        self.url = url.map(str::to_string);
        self.model = Some(model.to_string());
        self
    }
}
