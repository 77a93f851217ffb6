"""The servers under test: which cases each can run, its configuration, how it starts.

Each server gets one worker, no access log, its own config file and ports in the run dir, and
runs pinned to the server CPU. Configurations follow each server's own advice for static
serving (see bench/README.md, "Peer configurations"); the templates are in bench/templates/.
"""

import glob
import os
import resource
import shutil
import string

from .procs import StartError, free_port
from .scenarios import COMPRESS_LEVELS, FILES

TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "templates")
APACHE_MODULES = "/usr/lib/apache2/modules"
# Debian's libnginx-mod-http-brotli-filter (nginx itself has gzip only).
NGINX_BROTLI = "/usr/lib/nginx/modules/ngx_http_brotli_filter_module.so"
# Open files a server may have: the hard limit it inherits (it cannot raise it further).
NOFILE = min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[1])

# Why a server is absent from a scenario altogether (not a gap: it is not that kind of server).
NOT_A_PROXY = "not a reverse proxy"
PROXY_ONLY = "a proxy only"
# The UDP socket buffers of the HTTP/3 servers: spate's own size (src/server/quic/socket.rs).
QUIC_SOCKET_BUFFER = 4 << 20


class Env:
    """What every server start needs: paths, CPUs, the launcher, the binaries."""

    def __init__(
        self,
        run_dir,
        docroot,
        answer_root,
        cert,
        key,
        launcher,
        server_cpu,
        spate,
        floor,
        h3_client,
        h2o_quic=None,
        h2floor=None,
        spate_before=None,
    ):
        self.run_dir = run_dir
        self.docroot = docroot
        self.answer_root = answer_root
        self.cert = cert
        self.key = key
        self.launcher = launcher
        self.server_cpu = server_cpu
        self.spate = spate
        self.spate_before = spate_before  # an earlier spate build (`--spate-before`), or None
        self.floor = floor
        self.h2floor = h2floor  # the HTTP/2 floor binary, or None
        self.h3_client = h3_client  # the h2load that speaks HTTP/3, or None
        self.h2o_quic = h2o_quic  # an h2o with QUIC (the peers' build), or None
        self.is_root = os.geteuid() == 0


class Instance:
    """A running server for one group of cases (and its backend, for proxies)."""

    def __init__(self, port, proc, backend=None):
        self.port = port
        self.proc = proc
        self.backend = backend

    def stop(self):
        self.proc.stop()
        if self.backend:
            self.backend.stop()

    def for_case(self, case):
        """The instance that serves `case`: this one."""
        return self


class PerCase:
    """One instance per case of a group, for a server whose answer is fixed at start (the HTTP/2
    floor's body size): the group's cases still run interleaved with the other servers."""

    def __init__(self, by_key):
        self.by_key = by_key

    def for_case(self, case):
        return self.by_key[case.key]

    def stop(self):
        for inst in self.by_key.values():
            inst.stop()


class Server:
    name = ""
    canned = False  # answers every request with the same bytes (the floor)
    # Scenario ids this server takes part in; the others are left out of its tables.
    scenarios = ()

    def applies(self, case):
        """Whether this server has a line in `case`'s table at all."""
        return case.scenario in self.scenarios

    def unsupported(self, case, env):
        """A reason this server cannot run `case` (shown as "n/a: reason"), or None."""
        if case.protocol == "h3" and not env.h3_client:
            return "h2load here has no HTTP/3 support"
        return None

    def start(self, env, cases):
        """Start for `cases` (one group: same scenario, listener and mode)."""
        raise NotImplementedError


def all_servers():
    return [
        Spate(),
        H2o(),
        Nginx(),
        Nghttpd(),
        Nghttpx(),
        Apache(),
        Caddy(),
        Floor(),
        SizedFloor(),
        H2Floor(),
        FilesFloor(),
    ]


def by_name(names):
    known = {s.name: s for s in all_servers() + [SpateBefore()]}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            "unknown server(s): %s (known: %s)" % (", ".join(unknown), ", ".join(known))
        )
    return [known[n] for n in names]


class H2oDialect(Server):
    """h2o and spate: one YAML dialect, one generator."""

    scenarios = ("S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "Q1", "C1", "V1", "F1", "L1")

    def start(self, env, cases):
        case = cases[0]
        port = free_port()
        backend = start_backend(env, self.name, case.backends) if case.mode == "proxy" else None
        if case.mode == "fastcgi":
            backend = start_php_fpm(env, self.name)
        # Requests in flight at once: each holds one backend connection (HTTP/1.1).
        in_flight = max(c.conns * c.streams for c in cases)
        config = self.render(env, case, port, backend.ports if backend else None, in_flight)
        path = write(env, "%s-%s.yaml" % (self.name, case.scenario), config)
        proc = env.launcher.start(
            self.name, self.argv(env, path, case), env.run_dir, env.server_cpu
        )
        inst = Instance(port, proc, backend.proc if backend else None)
        wait_or_stop(inst, port)
        return inst

    def render(self, env, case, port, backend_ports, in_flight=None):
        listen_extra, globals_, paths = [], self.extra_globals(case), []
        if case.listener in ("tls", "quic"):
            listen_extra += [
                "  ssl:",
                "    certificate-file: %s" % env.cert,
                "    key-file: %s" % env.key,
            ]
        if case.listener == "quic":
            # As seed-004: the TLS listen and a QUIC listen on the same port number (the load
            # uses QUIC; the harness waits for the TCP side). No OCSP fetcher for a self-signed
            # certificate.
            listen_extra += ["    ocsp-update-interval: 0", "listen:"]
            listen_extra += ["  host: 127.0.0.1", "  port: %d" % port, "  type: quic"]
            listen_extra += self.quic_socket_lines()
            listen_extra += listen_extra[:3] + ["    ocsp-update-interval: 0"]
            # As max-connections for TCP: h2load leaves its QUIC connections to the idle
            # timeout, so one run's 1,000 are still there when the next starts.
            globals_ += ["max-quic-connections: 15000"]
        if case.mode == "proxy" and len(backend_ports) > 1:
            paths += ["      /:", "        proxy.reverse.url:", "          backends:"]
            paths += ["            - http://127.0.0.1:%d/" % p for p in backend_ports]
            paths += ["          balancer: least-conn"]
            paths += self.proxy_extras(in_flight or case.conns * case.streams)
        elif case.mode == "proxy":
            paths += [
                "      /:",
                "        proxy.reverse.url: http://127.0.0.1:%d/" % backend_ports[0],
            ]
            paths += self.proxy_extras(in_flight or case.conns * case.streams)
            if case.scenario == "S8":
                # As the seed's config: brotli configured (h2load asks for no encoding).
                paths += self.s8_proxy_extras()
                globals_ += ["compress:", "  br: 6"]
        elif case.mode == "answer":
            paths += self.answer_paths()
        elif case.mode == "fastcgi":
            # h2o's way to PHP: .php files of the document root to the FastCGI pool (h2o's
            # default: a connection per request, as nginx's fastcgi_keep_conn off).
            paths += ["      /:", "        file.dir: %s" % env.docroot]
            paths += ["        file.custom-handler:", "          extension: .php"]
            paths += ["          fastcgi.connect:", "            host: 127.0.0.1"]
            paths += ["            port: %d" % backend_ports[0]]
        else:
            paths += ["      /:", "        file.dir: %s" % env.docroot]
        if case.encoding:
            # C1: both algorithms at the levels every server gets (not h2o's defaults, 1 and 1).
            globals_ += ["compress:"] + ["  %s: %d" % kv for kv in COMPRESS_LEVELS.items()]
        values = {
            "user": self.user_line(env),
            "port": port,
            "listen_extra": "\n".join(listen_extra),
            "globals": "\n".join(globals_),
            "paths": "\n".join(paths),
        }
        return template("h2o.yaml", values)

    def user_line(self, env):
        return ""

    def extra_globals(self, case):
        return []

    def proxy_extras(self, in_flight):
        return []

    def s8_proxy_extras(self):
        return []

    def quic_socket_lines(self):
        """Lines under the QUIC listen that size its UDP socket's buffers."""
        return []

    def answer_paths(self):
        raise NotImplementedError

    def argv(self, env, config_path, case):
        raise NotImplementedError


class Spate(H2oDialect):
    name = "spate"

    def unsupported(self, case, env):
        reason = super().unsupported(case, env)
        if reason:
            return reason
        if not env.spate or not os.access(env.spate, os.X_OK):
            return "no spate binary at %s (run bench/setup)" % env.spate
        return None

    def extra_globals(self, case):
        return ["server-name: bench"] if case.mode == "answer" else []

    def proxy_extras(self, in_flight):
        # spate keeps 64 idle backend connections per worker by default; h2o keeps every one
        # and nginx gets `keepalive` as large as the requests in flight: so does spate.
        return ["        proxy.max-idle-connections: %d" % in_flight]

    def s8_proxy_extras(self):
        return ["        proxy.timeout.first_byte: 600000"]  # from the seed (h2o 2.2.5 lacks it)

    def answer_paths(self):
        return [
            "      /answer:",
            "        respond:",
            "          status: 200",
            '          body: "42"',
            "          content-type: text/plain",
            "          methods: [GET]",
        ]

    def argv(self, env, config_path, case):
        return [env.spate, "-c", config_path]


class SpateBefore(Spate):
    """An earlier spate build (`--spate-before BIN`), run in the same repetitions as spate so
    that a change's before and after meet the same machine; reported as a paired ratio, never
    as a peer. Only when named in --servers."""

    name = "spate-before"

    def unsupported(self, case, env):
        binary = getattr(env, "spate_before", None)
        if not binary or not os.access(binary, os.X_OK):
            return "no earlier spate binary (--spate-before BIN)"
        return Server.unsupported(self, case, env)

    def argv(self, env, config_path, case):
        return [env.spate_before, "-c", config_path]


class H2o(H2oDialect):
    name = "h2o"

    def unsupported(self, case, env):
        if case.protocol == "h3" and not env.h2o_quic:
            return "h2o 2.2.5 has no HTTP/3 (the peers' h2o with QUIC is not there)"
        if case.protocol == "h3" and case.mode == "answer":
            return "the peers' h2o is built without mruby"
        if case.backends > 1:
            return "h2o 2.2.5 has no balancer (h2o 2.3 has; see docs/bench-log.md)"
        return super().unsupported(case, env)

    def quic_socket_lines(self):
        # spate's QUIC socket takes 4 MiB buffers (src/server/quic/socket.rs); h2o's keeps the
        # kernel's default (208 KiB here) unless told, and at S8's c1000 it overflowed: 5,277
        # datagrams dropped at its socket in one run, a tenth of the requests failed (bench-log,
        # session 31). The same size for both.
        return ["  quic:", "    rcvbuf: %d" % QUIC_SOCKET_BUFFER, "    sndbuf: %d" % QUIC_SOCKET_BUFFER]

    def user_line(self, env):
        # h2o switches to "nobody" when started as root; keep it as it was started.
        return "user: root" if env.is_root else ""

    def answer_paths(self):
        # h2o 2.2.5 has no direct-response handler; mruby is its way to answer in-process.
        return [
            "      /answer:",
            "        mruby.handler: |",
            "          Proc.new do |env|",
            '            if env["REQUEST_METHOD"] == "GET" && env["PATH_INFO"] == ""',
            '              [200, {"content-type" => "text/plain"}, ["42"]]',
            "            else",
            '              [404, {"content-type" => "text/plain"}, ["not found"]]',
            "            end",
            "          end",
        ]

    def argv(self, env, config_path, case):
        if case.protocol == "h3":
            # The peers' h2o (HTTP/3) finds its share/ through H2O_ROOT.
            root = os.path.dirname(os.path.dirname(env.h2o_quic))
            return ["env", "H2O_ROOT=" + root, env.h2o_quic, "-c", config_path]
        return ["h2o", "-c", config_path]


class Nginx(Server):
    name = "nginx"
    scenarios = ("S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "C1", "V1", "F1", "L1")

    def unsupported(self, case, env):
        if case.protocol == "h3":
            return "nginx 1.22 has no HTTP/3"
        if case.encoding == "br" and not os.path.exists(NGINX_BROTLI):
            return "no brotli filter module: install Debian's libnginx-mod-http-brotli-filter"
        return super().unsupported(case, env)

    def start(self, env, cases):
        case = cases[0]
        port = free_port()
        backend = start_backend(env, self.name, case.backends) if case.mode == "proxy" else None
        if case.mode == "fastcgi":
            backend = start_php_fpm(env, self.name)
        block = self.server_block(cases, port, backend.ports if backend else None)
        proc = start_nginx(env, self.name, case.scenario, **block)
        inst = Instance(port, proc, backend.proc if backend else None)
        wait_or_stop(inst, port)
        return inst

    def server_block(self, cases, port, backend_ports):
        """What nginx.conf says for `cases` (one group): start_nginx's keyword arguments."""
        case = cases[0]
        if case.listener == "tls":
            listen = "listen 127.0.0.1:%d ssl http2;" % port
        elif case.protocol == "h2":
            listen = "listen 127.0.0.1:%d http2;" % port  # HTTP/2 with prior knowledge only
        else:
            listen = "listen 127.0.0.1:%d;" % port
        if case.mode == "proxy":
            body = (
                "location / { proxy_pass http://backend; proxy_http_version 1.1; "
                'proxy_set_header Connection ""; }'
            )
            # Keep every upstream connection the load can use: the others keep theirs too.
            servers = " ".join("server 127.0.0.1:%d;" % p for p in backend_ports)
            upstream = "upstream backend { %s%s keepalive %d; }" % (
                "least_conn; " if len(backend_ports) > 1 else "",
                servers,
                max(c.conns * c.streams for c in cases),
            )
        elif case.mode == "answer":
            body = 'location = /answer { return 200 "42"; }\n        location / { return 404; }'
            upstream = ""
        elif case.mode == "fastcgi":
            body = (
                "location ~ \\.php$ { include /etc/nginx/fastcgi_params; "
                "fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name; "
                "fastcgi_pass 127.0.0.1:%d; }" % backend_ports[0]
            )
            upstream = ""
        else:
            body = "location / { }"
            upstream = ""
        modules = ""
        if case.encoding:
            body += "\n        " + compress_directives("gzip")
            if os.path.exists(NGINX_BROTLI):
                modules = "load_module %s;" % NGINX_BROTLI
                body += "\n        " + compress_directives("brotli")
        # A proxied (or FastCGI) request holds a client stream and an upstream connection.
        # Upstream connections linger after use, so leave twice that (nginx warns and starts
        # reusing connections, failing streams, when the limit is reached).
        upstream_too = case.mode in ("proxy", "fastcgi")
        conns = max(c.conns * (2 * c.streams + 1 if upstream_too else 1) for c in cases)
        return {
            "listen": listen,
            "body": body,
            "upstream": upstream,
            "conns": conns,
            "modules": modules,
        }


class Nghttpd(Server):
    name = "nghttpd"
    scenarios = ("S1", "S2", "S3", "S7")

    def applies(self, case):
        return super().applies(case) and case.protocol == "h2"

    def start(self, env, cases):
        case = cases[0]
        port = free_port()
        argv = ["nghttpd", "-n1", "-a", "127.0.0.1", "-d", env.docroot]
        if case.listener == "tls":
            argv += [str(port), env.key, env.cert]
        else:
            argv += ["--no-tls", str(port)]
        inst = Instance(port, env.launcher.start(self.name, argv, env.run_dir, env.server_cpu))
        wait_or_stop(inst, port)
        return inst


class Nghttpx(Server):
    name = "nghttpx"
    scenarios = ("S4", "S8", "V1", "L1")

    def applies(self, case):
        return super().applies(case) and case.mode == "proxy"  # V1: its proxy rows

    def unsupported(self, case, env):
        if case.protocol == "h3":
            return "Debian's nghttpx is built without HTTP/3"
        if case.backends > 1:
            return "nghttpx has no least-conn balancer"
        return super().unsupported(case, env)

    def start(self, env, cases):
        case = cases[0]
        port = free_port()
        backend = start_backend(env, self.name)
        conf = write(env, "nghttpx.conf", "")  # keeps /etc/nghttpx/nghttpx.conf out of the run
        frontend = "127.0.0.1,%d" % port + ("" if case.listener == "tls" else ";no-tls")
        argv = [
            "nghttpx",
            "--conf=" + conf,
            "-n1",
            "-f",
            frontend,
            "-b",
            "127.0.0.1,%d" % backend.port,
            "--errorlog-file=" + os.path.join(env.run_dir, "nghttpx-error.log"),
            "--pid-file=" + os.path.join(env.run_dir, "nghttpx.pid"),
            "--no-ocsp",
        ]
        if case.listener == "tls":
            argv += [env.key, env.cert]
        proc = env.launcher.start(self.name, argv, env.run_dir, env.server_cpu)
        inst = Instance(port, proc, backend.proc)
        wait_or_stop(inst, port)
        return inst


class Apache(Server):
    name = "apache"
    scenarios = ("S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8")

    def unsupported(self, case, env):
        if case.protocol == "h3":
            return "Apache has no HTTP/3"
        if case.backends > 1:
            return "not set up: mod_proxy_balancer's bybusyness is not configured here"
        return super().unsupported(case, env)

    def start(self, env, cases):
        case = cases[0]
        port = free_port()
        backend = start_backend(env, self.name) if case.mode == "proxy" else None
        rt = os.path.join(env.run_dir, "apache-%s" % case.scenario)
        os.makedirs(rt, exist_ok=True)
        modules = ["mpm_event", "authz_core", "mime", "http2"]
        extra = []
        if case.listener == "tls":
            modules += ["ssl", "socache_shmcb"]
            extra += [
                "SSLEngine on",
                "SSLCertificateFile %s" % env.cert,
                "SSLCertificateKeyFile %s" % env.key,
                "SSLSessionCache shmcb:%s/ssl_scache(512000)" % rt,
            ]
        if case.mode == "proxy":
            modules += ["proxy", "proxy_http"]
            extra += ["ProxyPass / http://127.0.0.1:%d/" % backend.port]
        docroot = env.answer_root if case.mode == "answer" else env.docroot
        if case.mode == "answer":
            # No direct-response handler in Apache: a 2-byte file served as text/plain.
            extra += ['<Files "answer">', "ForceType text/plain", "</Files>"]
        threads = max(64, max(c.conns for c in cases) + 16)
        values = {
            "run": rt,
            "port": port,
            "listen_proto": " https" if case.listener == "tls" else "",
            "modules": "\n".join(
                "LoadModule %s_module %s/mod_%s.so" % (m, APACHE_MODULES, m) for m in modules
            ),
            "user": "User www-data\nGroup www-data" if env.is_root else "",
            "threads": threads,
            "docroot": docroot,
            "extra": "\n".join(extra),
        }
        path = write(env, "apache-%s.conf" % case.scenario, template("apache.conf", values))
        proc = env.launcher.start(
            self.name, ["apache2", "-f", path, "-DFOREGROUND"], env.run_dir, env.server_cpu
        )
        inst = Instance(port, proc, backend.proc if backend else None)
        wait_or_stop(inst, port)
        return inst


class Caddy(Server):
    """Caddy 2.6 (Debian's; quic-go): the HTTP/3 rows only, HTTP/1.1, HTTP/2 and HTTP/3 on one
    port as its default. Its admin API, automatic HTTPS and logs are off; its state goes to
    the run dir."""

    name = "caddy"
    scenarios = ("S8", "Q1")

    def applies(self, case):
        return super().applies(case) and case.protocol == "h3"

    def unsupported(self, case, env):
        if not shutil.which("caddy"):
            return "no caddy (apt-get install caddy)"
        return super().unsupported(case, env)

    def start(self, env, cases):
        case = cases[0]
        port = free_port()
        backend = start_backend(env, self.name) if case.mode == "proxy" else None
        if backend:
            handler = "reverse_proxy 127.0.0.1:%d" % backend.port
        else:
            handler = "root * %s\n\tfile_server" % env.docroot
        config = (
            "{\n\tadmin off\n\tauto_https off\n\tservers {\n\t\tprotocols h1 h2 h3\n\t}\n}\n"
            "https://127.0.0.1:%d {\n\tbind 127.0.0.1\n\ttls %s %s\n\t%s\n}\n"
            % (port, env.cert, env.key, handler)
        )
        path = write(env, "Caddyfile-%s" % case.scenario, config)
        home = os.path.join(env.run_dir, "caddy-home")
        os.makedirs(home, exist_ok=True)
        argv = ["caddy", "run", "--config", path, "--adapter", "caddyfile"]
        proc = env.launcher.start(
            self.name,
            argv,
            env.run_dir,
            env.server_cpu,
            env=dict(
                os.environ, HOME=home, XDG_DATA_HOME=home, XDG_CONFIG_HOME=home, GOMAXPROCS="1"
            ),
        )
        inst = Instance(port, proc, backend.proc if backend else None)
        wait_or_stop(inst, port)
        return inst


class Floor(Server):
    name = "floor"
    canned = True
    scenarios = ("S5", "S6")

    def unsupported(self, case, env):
        return missing_binary(self.name, env.floor)

    def start(self, env, cases):
        port = free_port()
        inst = Instance(
            port, env.launcher.start(self.name, [env.floor, str(port)], env.run_dir, env.server_cpu)
        )
        wait_or_stop(inst, port)
        return inst


class BodySizedFloor(Server):
    """A floor started as `BINARY PORT BODYSIZE`, the size of the file the case requests: its
    answer is fixed at start, so it runs one process per case (each measured on its own)."""

    canned = True

    def binary(self, env):
        raise NotImplementedError

    def unsupported(self, case, env):
        return missing_binary(self.name, self.binary(env))

    def start(self, env, cases):
        by_key = {}
        try:
            for case in cases:
                port = free_port()
                argv = self.argv(env, port, case)
                by_key[case.key] = Instance(
                    port, env.launcher.start(self.name, argv, env.run_dir, env.server_cpu)
                )
                by_key[case.key].proc.wait_listening(port)
        except StartError:
            PerCase(by_key).stop()
            raise
        return PerCase(by_key)

    def argv(self, env, port, case):
        return [self.binary(env), str(port), str(FILES[case.path.lstrip("/")])]


class SizedFloor(BodySizedFloor):
    """floor.c answering with a body of the case's file size (`floor PORT BODYSIZE`), as
    h2floor does on S1: next to the original floor (a 2-byte body) it shows what the file's
    bytes alone cost the kernel. Its headers are the original's (about 100 bytes), not a file
    server's (about 250)."""

    name = "floor-sized"
    scenarios = ("S5",)

    def binary(self, env):
        return env.floor


class H2Floor(BodySizedFloor):
    """h2floor.c: canned HEADERS + DATA for every request over h2c (`h2floor PORT BODYSIZE`)."""

    name = "h2floor"
    scenarios = ("S1", "S2")

    def binary(self, env):
        return env.h2floor


class FilesFloor(Server):
    """floor_files.c in its `pread` mode: the HTTP/1.1 cleartext V1 rows' floor, serving the
    requested file itself (an open-file cache that never checks again, the file read after its
    head into one output buffer, one write per read). Where floor.c shows what one canned answer
    costs, this shows what the kernel asks of any server for varied files."""

    name = "floor-files"
    scenarios = ("V1",)

    def applies(self, case):
        return (
            case.scenario in self.scenarios
            and case.h1
            and case.listener == "clear"
            and case.mode == "static"
        )

    def binary(self, env):
        return os.path.join(os.path.dirname(env.floor), "floor_files")

    def unsupported(self, case, env):
        return missing_binary(self.name, self.binary(env))

    def start(self, env, cases):
        port = free_port()
        argv = [self.binary(env), str(port), "pread", env.docroot]
        inst = Instance(port, env.launcher.start(self.name, argv, env.run_dir, env.server_cpu))
        wait_or_stop(inst, port)
        return inst


def missing_binary(name, path):
    """Why an anchor built by bench/setup cannot run, or None."""
    if not path or not os.access(path, os.X_OK):
        return "no %s binary at %s (run bench/setup)" % (name, path)
    return None


class Backend:
    def __init__(self, ports, proc):
        self.ports = ports
        self.port = ports[0]
        self.proc = proc


def start_backend(env, front, count=1):
    """The HTTP/1.1 backend of a proxy case: nginx serving the document root, on the server CPU
    too (its CPU is reported apart from the proxy's). `count` ports: as many backends for a
    balancer, all served by one nginx, so the backend side costs the same in every row."""
    ports = [free_port() for _ in range(count)]
    # The seeds' proxies open a backend connection per in-flight request (c100 x m100).
    proc = start_nginx(
        env,
        "backend-" + front,
        "backend",
        " ".join("listen 127.0.0.1:%d;" % p for p in ports),
        "location / { }",
        "",
        15000,
    )
    try:
        for p in ports:
            proc.wait_listening(p)
    except StartError:
        proc.stop()
        raise
    return Backend(ports, proc)


def php_fpm_binary():
    """Debian's versioned PHP-FPM (php-fpm8.2 on bookworm), or None."""
    found = sorted(glob.glob("/usr/sbin/php-fpm*"))
    return found[-1] if found else None


def start_php_fpm(env, front):
    """F1's FastCGI application: PHP-FPM with its own config on a TCP port, a static pool, on
    the server CPU too, as a proxy's backend (its CPU is reported apart from the front's)."""
    binary = php_fpm_binary()
    if not binary:
        raise StartError("php-fpm is not installed (apt-get install php-fpm)")
    port = free_port()
    tmp = os.path.join(env.run_dir, "php-fpm-%s" % front)
    os.makedirs(tmp, exist_ok=True)
    config = (
        "[global]\nerror_log = %s/error.log\ndaemonize = no\npid = %s/fpm.pid\n"
        "[bench]\nlisten = 127.0.0.1:%d\nlisten.backlog = 4096\npm = static\n"
        "pm.max_children = 16\npm.max_requests = 0\n" % (tmp, tmp, port)
    )
    path = write(env, "php-fpm-%s.conf" % front, config)
    argv = [binary, "-F", "-y", path, "-p", tmp] + (["-R"] if env.is_root else [])
    proc = env.launcher.start("php-fpm-" + front, argv, env.run_dir, env.server_cpu)
    try:
        proc.wait_listening(port)
    except StartError:
        proc.stop()
        raise
    return Backend([port], proc)


def compress_directives(module):
    """nginx's gzip or brotli filter at C1's level. Their default types (text/html) cover the
    page; `gzip_proxied any` compresses for clients behind a proxy too (h2load sends no Via,
    so it changes nothing here but says the proxied row is not held back)."""
    level = COMPRESS_LEVELS["br" if module == "brotli" else "gzip"]
    extra = " gzip_proxied any; gzip_vary on;" if module == "gzip" else ""
    return "%s on; %s_comp_level %d;%s" % (module, module, level, extra)


def start_nginx(env, name, tag, listen, body, upstream, conns, modules=""):
    tmp = os.path.join(env.run_dir, "%s-%s-tmp" % (name, tag))
    os.makedirs(tmp, exist_ok=True)
    config = nginx_config(env, tmp, listen, body, upstream, conns, modules)
    path = write(env, "%s-%s.conf" % (name, tag), config)
    return env.launcher.start(
        name, ["nginx", "-c", path, "-p", tmp, "-g", "daemon off;"], env.run_dir, env.server_cpu
    )


def nginx_config(env, tmp, listen, body, upstream, conns, modules=""):
    """templates/nginx.conf filled in; `tmp` holds nginx's pid, logs and temp dirs."""
    ssl = ""
    if "ssl" in listen:
        ssl = (
            "ssl_certificate %s; ssl_certificate_key %s; ssl_protocols TLSv1.2 TLSv1.3; "
            "ssl_session_cache shared:SSL:10m;" % (env.cert, env.key)
        )
    values = {
        "modules": modules,
        "tmp": tmp,
        "user": "user root;" if env.is_root else "",
        "connections": min(max(1024, conns + 256), NOFILE - 1000),
        "nofile": NOFILE,
        "listen": listen,
        "ssl": ssl,
        "root": env.docroot,
        "body": body,
        "upstream": upstream,
    }
    return template("nginx.conf", values)


def wait_or_stop(inst, port):
    try:
        inst.proc.wait_listening(port)
    except StartError:
        inst.stop()
        raise


def template(name, values):
    with open(os.path.join(TEMPLATES, name)) as f:
        return string.Template(f.read()).substitute(values)


def write(env, name, text):
    path = os.path.join(env.run_dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path
