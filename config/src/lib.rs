//! User input, in one place: [`InputError`] (every file a user gives — deployment, engine, profile,
//! workload spec, trace, table — that cannot be used is reported as file, line, field and reason),
//! YAML parsing that names the field at fault, the one deep merge behind every `base:` and override,
//! the built-in preset files, and a command's output files written whole or not at all.
//!
//! **Invariant:** knows no domain type. Presets are text here; the crate that owns a type parses them.

mod error;
mod files;
mod json;
mod output;
mod presets;
mod yaml;

pub use error::{FieldError, InputError};
pub use files::{read_text, MAX_CONFIG_BYTES, MAX_DATA_BYTES};
pub use json::parse_json_line;
pub use output::{prepare_out, write_file, write_lines, write_path, OutputError, WholeLines};
pub use presets::{
    parse_preset, parse_presets, preset_file, preset_files, preset_names, PresetFile,
};
pub use yaml::{from_value, line_of, merge, parse_value, parse_yaml, to_value};
