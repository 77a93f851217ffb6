//! h2o directives that only tune how h2o itself works (its threads, pipes, io_uring, key
//! process, kernel TLS): an h2o configuration that sets them runs on spate unchanged, and
//! `spate -t` (and a start) warns once for each, saying what spate does instead. Set to OFF,
//! which asks for what spate does anyway, they pass without a word.

use super::directives::TUNING;
use super::value::Ctx;
use super::yaml::Node;

/// Accepts one of [`TUNING`] (the directive table's list of them) with a warning (none for OFF). Returns false when `name` is not
/// one of them.
pub(super) fn apply(ctx: &mut Ctx, name: &str, v: &Node) -> bool {
    let Some((_, _, instead)) = TUNING.iter().find(|(n, _, _)| *n == name) else {
        return false;
    };
    if v.as_bool() != Some(false) {
        ctx.warn(
            v.line,
            format!("{name} tunes h2o's internals and is ignored: {instead}"),
        );
    }
    true
}
