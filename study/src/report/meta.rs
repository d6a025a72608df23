//! What every JSON output says about itself: the tool, its version and commit, the command line, when it
//! ran (UTC), the deployment (its name and the SHA-256 of its resolved YAML) and, for real runs, the
//! server's URL and model. Plain data: the caller fills it in (it reads no clock, no command line).

use serde::Serialize;

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
    /// The same, for a run against the server at `url` serving `model`.
    pub fn with_server(mut self, url: Option<&str>, model: &str) -> Meta {
        self.url = url.map(str::to_string);
        self.model = Some(model.to_string());
        self
    }

    /// `value` as a JSON file's pretty text (ending in a newline), with this metadata added as its `meta`
    /// field (an object's; anything else is written as `{"meta": …, "value": …}`).
    pub fn json<T: Serialize>(&self, value: &T) -> serde_json::Result<String> {
        let mut v = serde_json::to_value(value)?;
        let meta = serde_json::to_value(self)?;
        match &mut v {
            serde_json::Value::Object(m) => {
                m.insert("meta".into(), meta);
            }
            other => v = serde_json::json!({ "meta": meta, "value": other.take() }),
        }
        Ok(serde_json::to_string_pretty(&v)? + "\n")
    }
}

/// The metadata of a test's page.
#[cfg(test)]
pub(crate) fn test_meta() -> Meta {
    Meta {
        tool: "serverbench",
        version: "0.1.0",
        commit: "unknown",
        command: vec!["serverbench".into()],
        created_utc: "2026-12-04T00:00:00Z".into(),
        deployment: None,
        url: None,
        model: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_run_names_its_server_and_a_simulated_one_does_not() {
        let meta = test_meta();
        let plain = serde_json::to_string(&meta).unwrap();
        assert!(
            !plain.contains("url") && !plain.contains("deployment"),
            "{plain}"
        );
        let real = serde_json::to_string(&meta.with_server(Some("http://h:1"), "m")).unwrap();
        assert!(
            real.ends_with(r#""url":"http://h:1","model":"m"}"#),
            "{real}"
        );
    }

    #[test]
    fn a_json_file_carries_its_meta_beside_the_value() {
        let meta = test_meta();
        let object = meta.json(&serde_json::json!({"a": 1})).unwrap();
        assert!(object.starts_with("{\n  \"a\": 1,\n  \"meta\": {") && object.ends_with("}\n"));
        let list: serde_json::Value = serde_json::from_str(&meta.json(&[1, 2]).unwrap()).unwrap();
        assert_eq!(list["value"], serde_json::json!([1, 2]));
        assert_eq!(list["meta"]["tool"], "serverbench");
    }
}
