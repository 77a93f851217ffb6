//! Directive parsing: YAML tree -> [`Config`]. (Stub: filled in by the config work.)

use super::{Config, ConfigError, Location};
use std::path::Path;
use std::sync::Arc;

/// Reads and validates a configuration file. Every problem found is returned, not just the first.
pub fn load_file(path: &Path) -> Result<Config, Vec<ConfigError>> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, &name),
        Err(e) => Err(vec![ConfigError {
            at: Location {
                file: Arc::from(name.as_str()),
                line: 0,
            },
            message: format!("cannot read: {e}"),
        }]),
    }
}

/// Parses configuration text; `file` names it in errors.
pub fn load_str(_text: &str, file: &str) -> Result<Config, Vec<ConfigError>> {
    Err(vec![ConfigError {
        at: Location {
            file: Arc::from(file),
            line: 1,
        },
        message: "configuration loading is not implemented yet".into(),
    }])
}
