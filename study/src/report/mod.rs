//! How the studies' results are shown: the text a command prints, its CSV, its HTML page. Each
//! function takes a result and returns text; none prints, writes a file or reads a clock (the binary
//! does, with what these return). A result's renderers are beside each other here, one file per
//! command: `summary` (one run: `simulate`, `replay`), `sweep`, `screen`, `whatif`, `compare`, `scan`
//! (`workload scan`), `timeline` (`simulate --timeline`); `page` is the HTML page they fill and `meta`
//! the metadata every JSON output and page carries.

pub mod compare;
pub(crate) mod meta;
mod page;
pub mod scan;
pub mod screen;
pub mod slo;
pub mod summary;
pub mod sweep;
pub mod timeline;
pub mod whatif;

pub use meta::{DeploymentMeta, Meta};
pub use page::Report;

/// Files a command writes into its `--out` folder together, and the line it prints once they are
/// written.
#[derive(Clone, Debug)]
pub struct OutFiles {
    /// Each file's name in the folder and its text.
    pub files: Vec<(&'static str, String)>,
    /// What the command prints after writing them.
    pub line: String,
}
