//! `compress`, `compress-minimum-size` and the old `gzip` switch: on-the-fly compression,
//! inherited from the global level down to paths like every other option.

use super::value::{show, Ctx};
use super::yaml::Node;
use super::CompressConf;

/// The compression options as set so far at some level; `None` means "not set here or above".
#[derive(Debug, Clone, Default)]
pub(super) struct CompressOpts {
    /// The algorithms of the last `compress` (or `gzip`) seen; `Some(None)` is OFF.
    algorithms: Option<Option<Levels>>,
    minimum_size: Option<u64>,
}

/// Quality per algorithm; `None` leaves the algorithm off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Levels {
    br: Option<u32>,
    zstd: Option<u32>,
    gzip: Option<u32>,
}

/// An algorithm's name, its qualities and the quality `ON` or a bare name gives it (h2o's
/// defaults: fast, since the work is done for every response).
struct Algorithm {
    name: &'static str,
    min: u32,
    max: u32,
    default: u32,
    slot: fn(&mut Levels) -> &mut Option<u32>,
}

const ALGORITHMS: [Algorithm; 3] = [
    Algorithm {
        name: "br",
        min: 0,
        max: 11,
        default: 1,
        slot: |l| &mut l.br,
    },
    Algorithm {
        name: "zstd",
        min: 1,
        max: 22,
        default: 3,
        slot: |l| &mut l.zstd,
    },
    Algorithm {
        name: "gzip",
        min: 1,
        max: 9,
        default: 1,
        slot: |l| &mut l.gzip,
    },
];

impl CompressOpts {
    /// Applies one compression directive. Returns false when `name` is not one of them.
    pub fn apply(&mut self, ctx: &mut Ctx, name: &str, v: &Node) -> bool {
        match name {
            "compress" => {
                if let Some(levels) = compress(ctx, v) {
                    self.algorithms = Some(levels);
                }
            }
            // h2o's older switch: ON is `compress: [gzip]`, OFF turns compression off.
            "gzip" => {
                if let Some(on) = ctx.bool(name, v) {
                    self.algorithms = Some(on.then(|| Levels {
                        gzip: Some(ALGORITHMS[2].default),
                        ..Levels::default()
                    }));
                }
            }
            "compress-minimum-size" => {
                if let Some(n) = ctx.uint(name, v, 0) {
                    self.minimum_size = Some(n);
                }
            }
            _ => return false,
        }
        true
    }

    /// What applies to a path: `None` when compression is off (the default).
    pub fn build(&self) -> Option<CompressConf> {
        let levels = self.algorithms.flatten()?;
        Some(CompressConf {
            br: levels.br,
            zstd: levels.zstd,
            gzip: levels.gzip,
            minimum_size: self
                .minimum_size
                .unwrap_or(CompressConf::DEFAULT_MINIMUM_SIZE),
        })
    }
}

/// `ON`, `OFF`, `[br, gzip]` or `{br: 6, gzip: 6}`. `Some(None)` is OFF.
fn compress(ctx: &mut Ctx, v: &Node) -> Option<Option<Levels>> {
    if let Some(on) = v.as_bool() {
        if !on {
            return Some(None);
        }
        let mut all = Levels::default();
        for a in &ALGORITHMS {
            *(a.slot)(&mut all) = Some(a.default);
        }
        return Some(Some(all));
    }
    let mut levels = Levels::default();
    if let Some(items) = v.as_seq() {
        for item in items {
            let a = algorithm(ctx, item)?;
            *(a.slot)(&mut levels) = Some(a.default);
        }
    } else if let Some(entries) = v.as_map() {
        for (k, q) in entries {
            let a = algorithm(ctx, k)?;
            let quality = match q.as_u64() {
                Some(n) if (u64::from(a.min)..=u64::from(a.max)).contains(&n) => n as u32,
                _ => {
                    ctx.error(
                        q.line,
                        format!(
                            "compress: the quality of {} is {}-{}, got {}",
                            a.name,
                            a.min,
                            a.max,
                            show(q)
                        ),
                    );
                    return None;
                }
            };
            *(a.slot)(&mut levels) = Some(quality);
        }
    } else {
        ctx.error(
            v.line,
            format!(
                "compress expects ON, OFF, a sequence of algorithms or a mapping of algorithm to quality, got {}",
                show(v)
            ),
        );
        return None;
    }
    // An empty sequence or mapping enables nothing: the same as OFF.
    Some((levels != Levels::default()).then_some(levels))
}

fn algorithm(ctx: &mut Ctx, v: &Node) -> Option<&'static Algorithm> {
    let found = v
        .as_str()
        .and_then(|n| ALGORITHMS.iter().find(|a| a.name == n));
    if found.is_none() {
        ctx.error(
            v.line,
            format!("compress: unknown algorithm {} (br, zstd or gzip)", show(v)),
        );
    }
    found
}
