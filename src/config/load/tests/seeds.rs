//! The seed configurations (published h2o benchmark setups) load as h2o reads them.

use super::*;

/// A seed configuration with its placeholders replaced as the seeds' README says.
fn seed(text: &str) -> String {
    let (crt, key) = cert();
    // Ports first, through markers, so a new port is not matched by a later replacement;
    // paths after, so a port pattern never hits the certificate's path (it has our pid).
    text.replace("3000", "<A>")
        .replace("3001", "<B>")
        .replace("443", "<C>")
        .replace("80", "<D>")
        .replace("<A>", "18000")
        .replace("<B>", "18001")
        .replace("<C>", "18443")
        .replace("<D>", "18080")
        .replace("/path/to/htdocs", "/srv/docroot")
        .replace("/usr/local/nginx/html", "/srv/docroot")
        .replace("/path/to/server.crt", crt)
        .replace("/path/to/server.key", key)
        .replace("/certs/localhost.pem", crt)
        .replace("/certs/localhost.key", key)
        .replace("/app/log/", "/srv/log/")
}

const SEED_WEB: &str = include_str!("../../testdata/seed-000-h2-benchmark-2015--web.yaml");
const SEED_BACKEND: &str =
    include_str!("../../testdata/seed-000-h2-benchmark-2015--backend-http1.yaml");
const SEED_TLS_WEB: &str = include_str!("../../testdata/seed-000-h2-benchmark-2015--tls-web.yaml");
const SEED_PROXY: &str = include_str!("../../testdata/seed-000-h2-benchmark-2015--proxy.yaml");
const SEED_TLS_PROXY: &str =
    include_str!("../../testdata/seed-000-h2-benchmark-2015--tls-proxy.yaml");
const SEED_NGINX_FINAL: &str = include_str!("../../testdata/seed-001-h2o-vs-nginx--h2o-final.yaml");
const SEED_NGINX_INITIAL: &str =
    include_str!("../../testdata/seed-001-h2o-vs-nginx--h2o-initial.yaml");
const SEED_H2_H3: &str = include_str!("../../testdata/seed-004-proxy-h2-h3--h2o.yaml");

#[test]
fn seed_web() {
    let c = ok(&seed(SEED_WEB));
    assert_eq!(c.listeners.len(), 1);
    assert_eq!(c.listeners[0].addr, "0.0.0.0:18000".parse().unwrap());
    assert_eq!(c.listeners[0].kind, ListenKind::Tcp);
    assert!(c.listeners[0].tls.is_none());
    assert_eq!(c.listeners[0].at.line, 2);
    assert_eq!(c.http2.max_concurrent_requests_per_connection, 1024);
    assert_eq!(c.num_threads, 1);
    assert_eq!(c.max_connections, 1024);
    assert_eq!(c.hosts.len(), 1);
    assert_eq!(
        (c.hosts[0].name.as_str(), c.hosts[0].port),
        ("localhost", None)
    );
    let p = path(&c, 0, "/");
    let f = file(p);
    assert_eq!(f.dir, PathBuf::from("/srv/docroot"));
    assert_eq!(f.index, FileConf::default().index);
    assert!(f.etag && !f.dirlisting && !f.send_compressed);
    assert!(p.headers.is_empty());
    assert_eq!(p.access_log, None);
    assert_eq!(p.at.line, 8);
}

#[test]
fn seed_backend() {
    let c = ok(&seed(SEED_BACKEND));
    assert_eq!(c.listeners[0].addr, "0.0.0.0:18001".parse().unwrap());
    assert_eq!(c.max_connections, 15000);
    assert_eq!(c.num_threads, 1);
    assert_eq!(c.http2.max_concurrent_requests_per_connection, 1024);
    assert_eq!(file(path(&c, 0, "/")).dir, PathBuf::from("/srv/docroot"));
}

#[test]
fn seed_tls_web() {
    let c = ok(&seed(SEED_TLS_WEB));
    assert_eq!(c.listeners.len(), 1);
    assert_eq!(c.listeners[0].addr, "0.0.0.0:18000".parse().unwrap());
    let tls = c.listeners[0].tls.as_ref().expect("ssl");
    assert_eq!(tls.identities.len(), 1);
    assert!(tls.identities[0].names.is_empty());
    assert_eq!(tls.min_version, crate::config::TlsVersion::Tls12);
    assert!(tls.cipher_suites.is_none() && tls.kx_groups.is_none());
    assert_eq!(c.listeners[0].kind, ListenKind::Tcp);
    assert_eq!(file(path(&c, 0, "/")).dir, PathBuf::from("/srv/docroot"));
}

#[test]
fn seed_h2o_vs_nginx() {
    let c = ok(&seed(SEED_NGINX_FINAL));
    assert_eq!(c.num_threads, 16);
    assert_eq!(c.max_connections, 10240);
    assert_eq!(c.listeners[0].addr, "0.0.0.0:18080".parse().unwrap());
    assert_eq!(
        (c.hosts[0].name.as_str(), c.hosts[0].port),
        ("127.0.0.1", Some(18080))
    );
    assert_eq!(file(path(&c, 0, "/")).dir, PathBuf::from("/srv/docroot"));

    let c = ok(&seed(SEED_NGINX_INITIAL));
    assert_eq!(c.hosts[0].port, Some(18080));
    assert_eq!(c.max_connections, 1024);
}

#[test]
fn seed_proxies_load() {
    for (text, tls) in [(SEED_PROXY, false), (SEED_TLS_PROXY, true)] {
        let c = ok(&seed(text));
        assert_eq!(c.listeners[0].addr, "0.0.0.0:18000".parse().unwrap());
        assert_eq!(c.listeners[0].tls.is_some(), tls);
        assert_eq!(c.http2.max_concurrent_requests_per_connection, 1024);
        let p = path(&c, 0, "/");
        match &p.handler {
            // `proxy.keepalive: ON` keeps h2o's default keep-alive timeout.
            HandlerConf::Proxy(conf) => assert_eq!(
                conf,
                &ProxyConf::new(UpstreamUrl {
                    addr: UpstreamAddr::Tcp {
                        host: "127.0.0.1".into(),
                        port: 18001,
                    },
                    authority: "127.0.0.1:18001".into(),
                    path: "/".into(),
                    tls: false,
                })
            ),
            other => panic!("not a proxy: {other:?}"),
        }
    }
}

#[test]
fn seed_h2_h3_loads_with_brotli_6() {
    let c = ok(&seed(SEED_H2_H3));
    let p = path(&c, 0, "/");
    assert!(matches!(p.handler, HandlerConf::Proxy(_)));
    assert_eq!(
        p.compress,
        Some(CompressConf {
            br: Some(6),
            zstd: None,
            gzip: None,
            minimum_size: 100
        })
    );
}

#[test]
fn seed_h2_h3_tree_and_listeners() {
    let root = match yaml::parse(&seed(SEED_H2_H3)) {
        Ok(Some(r)) => r,
        other => panic!("{other:?}"),
    };
    let find = |n: &'static Node, key: &str| -> Vec<&'static Node> {
        n.as_map()
            .unwrap_or_default()
            .iter()
            .filter(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
            .collect()
    };
    let root: &'static Node = Box::leak(Box::new(root));
    let host = find(find(root, "hosts")[0], "localhost")[0];
    let listens = find(host, "listen");
    assert_eq!(listens.len(), 2);
    // The second listen: its own `type` first, then the merged anchor's keys.
    let keys: Vec<_> = listens[1]
        .as_map()
        .unwrap_or_default()
        .iter()
        .map(|(k, _)| k.as_str().unwrap_or("?"))
        .collect();
    assert_eq!(keys, vec!["type", "port", "ssl"]);
    assert_eq!(find(listens[1], "type")[0].as_str(), Some("quic"));
    assert_eq!(find(listens[1], "port")[0].as_u64(), Some(18443));
    let ssl = find(listens[1], "ssl")[0];
    assert_eq!(find(ssl, "key-file")[0].as_str(), Some(cert().1.as_str()));
    assert!(matches!(
        &find(ssl, "cipher-suite-tls1.3")[0].kind,
        NodeKind::Seq(s) if s.len() == 3
    ));
    assert_eq!(listens[0], &ssl_listen_anchor(listens[0]));

    let mut ctx = Ctx::new("t.yaml");
    let mut l = Listeners::default();
    for v in listens {
        l.add(&mut ctx, v, Some((0, "localhost")));
    }
    assert!(ctx.errors.is_empty(), "{:?}", ctx.errors);
    let got: Vec<_> = l
        .list
        .iter()
        .map(|l| (l.addr.port(), l.kind.clone(), l.tls.is_some()))
        .collect();
    assert_eq!(
        got,
        vec![
            (18443, ListenKind::Tcp, true),
            (18443, ListenKind::Quic, true)
        ]
    );
}

/// The anchored mapping is the first listen itself (identity helper for readability).
fn ssl_listen_anchor(n: &Node) -> Node {
    n.clone()
}
