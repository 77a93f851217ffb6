"""The generated h2o/spate YAML: the shapes the lead's spate and h2o 2.2.5 expect."""

from benchlib import servers
from benchlib.scenarios import select


def case(key):
    return next(c for c in select() if c.key == key)


def test_spate_s6_uses_respond_and_server_name(env):
    text = servers.Spate().render(env, case("S6-c100"), 8080, None)
    assert "num-threads: 1" in text
    assert "  host: 127.0.0.1\n  port: 8080\n" in text
    assert "server-name: bench" in text
    assert "      /answer:\n        respond:\n          status: 200\n" in text
    assert '          body: "42"' in text
    assert "access-log" not in text
    assert "$" not in text.replace("$-placeholders", "")


def test_h2o_s6_uses_mruby_and_no_spate_only_directives(env):
    text = servers.H2o().render(env, case("S6-c100"), 8080, None)
    assert "mruby.handler" in text
    assert "respond" not in text and "server-name" not in text


def test_tls_static_and_proxy_configs(env):
    tls = servers.Spate().render(env, case("S3-6b"), 8443, None)
    assert "  ssl:\n    certificate-file: /run/cert.pem\n    key-file: /run/key.pem" in tls
    assert "file.dir: /run/htdocs" in tls
    s8 = servers.H2o().render(env, case("S8-2-c100"), 8443, [9000])
    assert "proxy.reverse.url: http://127.0.0.1:9000/" in s8
    assert "compress:\n  br: 6" in s8
    assert "proxy.timeout.first_byte" not in s8  # h2o 2.2.5 refuses it
    spate_s8 = servers.Spate().render(env, case("S8-2-c100"), 1, [2])
    assert "proxy.timeout.first_byte" in spate_s8
    assert "proxy.max-idle-connections: 1000\n" in spate_s8
    assert "max-idle" not in s8
    assert "type: quic" in servers.Spate().render(env, case("S8-3-c100"), 1, [2])


def test_spate_s4_is_a_reverse_proxy_to_the_backend_on_every_case(env):
    cases = [c for c in select(["S4"]) if c.backends == 1]
    assert len(cases) == 8  # h2c and TLS front, 6 B and 4 KiB, with and without -w30 -W30
    for c in cases:
        assert servers.Spate().applies(c), c.key
        text = servers.Spate().render(env, c, 8443, [9000])
        assert "      /:\n        proxy.reverse.url: http://127.0.0.1:9000/\n" in text, c.key
        assert "file.dir" not in text and "compress" not in text, c.key
        assert ("  ssl:\n    certificate-file: /run/cert.pem" in text) == (c.listener == "tls")
        # As many idle backend connections kept as requests in flight (nginx gets as many).
        assert "        proxy.max-idle-connections: 10000\n" in text, c.key
        # Otherwise line for line the configuration h2o gets (h2o keeps every idle one).
        h2o = servers.H2o().render(env, c, 8443, [9000])
        assert text.replace("        proxy.max-idle-connections: 10000\n", "") == h2o, c.key
    flags = sorted(c.load_flags() for c in cases)
    assert flags == ["h2load -c100 -m100"] * 4 + ["h2load -c100 -m100 -w30 -W30"] * 4
    assert sorted({c.path for c in cases}) == ["/4k.txt", "/6b.txt"]


def test_s4_four_backends_least_conn(env):
    lc = case("S4-clear-4k-lc4")
    assert lc.group != case("S4-clear-4k").group  # a server of its own
    ports = [9001, 9002, 9003, 9004]
    text = servers.Spate().render(env, lc, 8080, ports)
    urls = "".join("            - http://127.0.0.1:%d/\n" % p for p in ports)
    want = "        proxy.reverse.url:\n          backends:\n%s          balancer: least-conn\n"
    assert want % urls in text
    assert "        proxy.max-idle-connections: 10000\n" in text
    block = servers.Nginx().server_block([lc], 8080, ports)
    assert block["upstream"] == (
        "upstream backend { least_conn; server 127.0.0.1:9001; server 127.0.0.1:9002; "
        "server 127.0.0.1:9003; server 127.0.0.1:9004; keepalive 10000; }"
    )
    assert "balancer" in servers.H2o().unsupported(lc, env)
    assert "least-conn" in servers.Nghttpx().unsupported(lc, env)


def test_who_takes_part_and_why_not(env):
    assert not servers.Nghttpd().applies(case("S5"))
    assert servers.Nghttpd().applies(case("S7-2-002"))
    assert not servers.Nghttpd().applies(case("S7-1-002"))
    assert servers.Floor().applies(case("S6-c10")) and not servers.Floor().applies(case("S1-6b"))
    assert "no spate binary" in servers.Spate().unsupported(case("S5"), env)
    assert "HTTP/3" in servers.Nginx().unsupported(case("S8-3-c100"), env)
    assert servers.Nginx().unsupported(case("S8-2-c100"), env) is None


def test_peer_templates_have_every_placeholder_filled():
    for name in ("nginx.conf", "apache.conf", "h2o.yaml"):
        keys = {
            "tmp",
            "user",
            "connections",
            "nofile",
            "listen",
            "ssl",
            "root",
            "body",
            "upstream",
            "run",
            "port",
            "listen_proto",
            "modules",
            "threads",
            "docroot",
            "extra",
            "listen_extra",
            "globals",
            "paths",
        }
        text = servers.template(name, {k: "X" for k in keys})
        assert "$" not in text.replace("$-placeholders", "")


def test_http3_rows_listen_on_tls_and_quic_at_one_port(env):
    for c in select(["Q1", "S8"]):
        if c.listener != "quic":
            continue
        for server in (servers.Spate(), servers.H2o()):
            text = server.render(env, c, 8443, [9000])
            assert text.count("listen:\n  host: 127.0.0.1\n  port: 8443\n") == 2, c.key
            assert text.count("  type: quic\n") == 1, c.key
            assert text.count("    certificate-file: /run/cert.pem\n") == 2, c.key
            assert "\nmax-quic-connections: 15000\n" in text, c.key
        # h2o's QUIC socket gets spate's 4 MiB buffers; spate sizes its own.
        quic_buffers = "  type: quic\n  quic:\n    rcvbuf: 4194304\n    sndbuf: 4194304\n  ssl:\n"
        assert quic_buffers in servers.H2o().render(env, c, 8443, [9000]), c.key
        assert "rcvbuf" not in servers.Spate().render(env, c, 8443, [9000]), c.key
    q1 = [c.key for c in select(["Q1"])]
    assert q1 == ["Q1-6b", "Q1-4k"]
    assert {c.load_flags() for c in select(["Q1"])} == {"h2load -c100 -m10 --alpn-list=h3"}


def test_http3_cells_need_the_http3_tools(env):
    q1 = case("Q1-6b")
    assert servers.Spate().unsupported(q1, env) == "h2load here has no HTTP/3 support"
    assert "no HTTP/3" in servers.H2o().unsupported(q1, env)
    env.h3_client, env.h2o_quic = "/peers/h2load", "/peers/h2o/bin/h2o"
    assert servers.H2o().unsupported(q1, env) is None
    argv = servers.H2o().argv(env, "/x/h2o.yaml", q1)
    assert argv == ["env", "H2O_ROOT=/peers/h2o", "/peers/h2o/bin/h2o", "-c", "/x/h2o.yaml"]
    assert servers.H2o().argv(env, "/x/h2o.yaml", case("S3-6b"))[0] == "h2o"
    # Caddy has a column in the HTTP/3 rows only.
    assert servers.Caddy().applies(q1) and servers.Caddy().applies(case("S8-3-c100"))
    assert not servers.Caddy().applies(case("S8-2-c100"))
