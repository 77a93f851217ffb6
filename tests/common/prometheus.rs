//! Reading spate's metrics endpoint with a real Prometheus parser (`prometheus_client`'s, run
//! by the system Python: scripts/test installs python3-prometheus-client).

use super::system_python;

/// Parses Prometheus text with `prometheus_client`'s parser; returns `name{labels} value`
/// lines, sorted labels.
pub fn parse_prometheus(text: &str) -> Vec<String> {
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{s.name}{{{labels}}} {s.value}")
"#;
    let out = system_python(script, text.as_bytes());
    assert!(
        out.status.success(),
        "the Prometheus parser refused the scrape (scripts/test installs python3-prometheus-client): {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

pub fn sample(samples: &[String], key: &str) -> f64 {
    samples
        .iter()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(-1.0)
}

/// Scrapes `path` over HTTP/1.1 until `ready` accepts the samples (other workers publish
/// every 200 ms) or 15 s passed; returns the last samples.
pub fn scrape_until(
    s: &super::Spate,
    path: &str,
    ready: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let r = super::clients::h1_get(s, path);
        assert_eq!(r.status, 200, "{}", r.text());
        let samples = parse_prometheus(&r.text());
        if ready(&samples) || std::time::Instant::now() > end {
            return samples;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
