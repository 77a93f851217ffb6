// One case of the QUIC interop runner's server tests, played by a quic-go client over HTTP/3
// (bench/quic-interop/run). Usage: quic-interop-go CASE BASE_URL. Prints "ok" or "fail: why" and
// exits 0 or 1; 127 for a case quic-go's public API cannot play (chacha20 and keyupdate need
// its internal packages).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
)

var sizes = map[string]int{"1k.bin": 1 << 10, "1m.bin": 1 << 20, "5m.bin": 5 << 20, "10m.bin": 10 << 20}

// pattern: the served files' bytes, byte i being i*7 mod 251.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251 * 7 % 251)
	}
	return b
}

// client: one http3.Transport whose QUIC connections are kept, to look at them.
type client struct {
	tr    *http3.Transport
	mu    sync.Mutex
	conns []*quic.Conn
	via   *quic.Transport // when set, connections are dialled from it
}

func newClient(tlsConf *tls.Config, conf *quic.Config) *client {
	c := &client{}
	c.tr = &http3.Transport{
		TLSClientConfig: tlsConf,
		QUICConfig:      conf,
		Dial: func(ctx context.Context, addr string, t *tls.Config, q *quic.Config) (*quic.Conn, error) {
			var conn *quic.Conn
			var err error
			if c.via != nil {
				udp, rerr := net.ResolveUDPAddr("udp", addr)
				if rerr != nil {
					return nil, rerr
				}
				conn, err = c.via.DialEarly(ctx, udp, t, q)
			} else {
				conn, err = quic.DialAddrEarly(ctx, addr, t, q)
			}
			if err == nil {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.mu.Unlock()
			}
			return conn, err
		},
	}
	return c
}

func (c *client) last() *quic.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.conns) == 0 {
		return nil
	}
	return c.conns[len(c.conns)-1]
}

// get fetches a file and checks its bytes; `during` (if set) runs once 2 MB were read.
func (c *client) get(ctx context.Context, base, name, method string, during func() error) error {
	req, err := http.NewRequestWithContext(ctx, method, base+name, nil)
	if err != nil {
		return err
	}
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: status %d", name, resp.StatusCode)
	}
	h := sha256.New()
	if during != nil {
		if _, err := io.CopyN(h, resp.Body, 2<<20); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := during(); err != nil {
			return err
		}
	}
	if _, err := io.Copy(h, resp.Body); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	want := sha256.Sum256(pattern(sizes[name]))
	if !bytes.Equal(h.Sum(nil), want[:]) {
		return fmt.Errorf("%s: not the file", name)
	}
	return nil
}

func (c *client) getAll(ctx context.Context, base string, names ...string) error {
	errs := make(chan error, len(names))
	for _, n := range names {
		go func() { errs <- c.get(ctx, base, n, http.MethodGet, nil) }()
	}
	for range names {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// relay: a UDP forwarder between the client and the server whose server-side socket can be
// replaced (a NAT rebinding: the server sees a new port, the same connection IDs).
type relay struct {
	front  *net.UDPConn
	server *net.UDPAddr
	mu     sync.Mutex
	back   *net.UDPConn
	peer   *net.UDPAddr
}

func startRelay(server *net.UDPAddr) (*relay, error) {
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	r := &relay{front: front, server: server}
	if err := r.rebind(); err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.peer = from
			back := r.back
			r.mu.Unlock()
			back.Write(buf[:n])
		}
	}()
	return r, nil
}

func (r *relay) rebind() error {
	back, err := net.DialUDP("udp", nil, r.server)
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := r.back
	r.back = back
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			peer := r.peer
			r.mu.Unlock()
			if peer != nil {
				r.front.WriteToUDP(buf[:n], peer)
			}
		}
	}()
	return nil
}

func run(ctx context.Context, tc, base string) error {
	qlogDir, err := os.MkdirTemp("", "quic-interop-qlog")
	if err != nil {
		return err
	}
	defer os.RemoveAll(qlogDir)
	os.Setenv("QLOGDIR", qlogDir)
	tlsConf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}
	conf := &quic.Config{Tracer: qlog.DefaultConnectionTracer}
	c := newClient(tlsConf, conf)
	defer c.tr.Close()

	switch tc {
	case "handshake":
		return c.getAll(ctx, base, "1k.bin")
	case "http3":
		return c.getAll(ctx, base, "1k.bin", "1m.bin")
	case "transfer":
		return c.getAll(ctx, base, "1m.bin", "5m.bin", "10m.bin")
	case "retry":
		if err := c.getAll(ctx, base, "1k.bin"); err != nil {
			return err
		}
		c.tr.Close()
		time.Sleep(100 * time.Millisecond) // the qlog writer flushes when its connection closes
		if !sawRetry(qlogDir) {
			return errors.New("no Retry received")
		}
		return nil
	case "multiconnect":
		for i := 0; i < 5; i++ {
			if err := c.getAll(ctx, base, "1k.bin"); err != nil {
				return err
			}
			c.tr.CloseIdleConnections()
		}
		return nil
	case "resumption", "zerortt":
		tlsConf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		if err := c.getAll(ctx, base, "1k.bin"); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond) // the ticket comes after the handshake
		c.tr.Close()
		c2 := newClient(tlsConf, conf)
		defer c2.tr.Close()
		method := http.MethodGet
		if tc == "zerortt" {
			method = http3.MethodGet0RTT
		}
		if err := c2.get(ctx, base, "1m.bin", method, nil); err != nil {
			return err
		}
		st := c2.last().ConnectionState()
		if !st.TLS.DidResume {
			return errors.New("not resumed")
		}
		if tc == "zerortt" && !st.Used0RTT {
			return errors.New("0-RTT not used")
		}
		return nil
	case "v2":
		conf.Versions = []quic.Version{quic.Version2} // HTTP/3 dials with one version
		if err := c.getAll(ctx, base, "1k.bin"); err != nil {
			return err
		}
		if v := c.last().ConnectionState().Version; v != quic.Version2 {
			return fmt.Errorf("version %v, not v2", v)
		}
		return nil
	case "rebind-port":
		u := strings.TrimSuffix(strings.TrimPrefix(base, "https://"), "/")
		server, err := net.ResolveUDPAddr("udp", u)
		if err != nil {
			return err
		}
		r, err := startRelay(server)
		if err != nil {
			return err
		}
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		// Dial the relay: the URL keeps the server's authority, the packets go through it.
		c.via = &quic.Transport{Conn: &redirect{pc, r.front.LocalAddr(), server}}
		if err := c.get(ctx, base, "10m.bin", http.MethodGet, r.rebind); err != nil {
			return err
		}
		return c.getAll(ctx, base, "1k.bin")
	case "connectionmigration":
		// Connection IDs of one length on both sockets (quic-go's dialler alone uses empty
		// ones, which a second socket could not route).
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		c.via = &quic.Transport{Conn: udp, ConnectionIDLength: 8}
		migrate := func() error {
			conn := c.last()
			udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
			if err != nil {
				return err
			}
			path, err := conn.AddPath(&quic.Transport{Conn: udp, ConnectionIDLength: 8})
			if err != nil {
				return err
			}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := path.Probe(pctx); err != nil {
				return fmt.Errorf("probing the new path: %w", err)
			}
			return path.Switch()
		}
		if err := c.get(ctx, base, "10m.bin", http.MethodGet, migrate); err != nil {
			return err
		}
		return c.getAll(ctx, base, "1k.bin")
	case "chacha20", "keyupdate":
		return errUnsupported
	}
	return errUnsupported
}

// redirect: a socket that sends what is meant for `server` to `via` and reports what comes
// from `via` as coming from `server` (quic-go then dials the relay transparently).
// Only net.PacketConn's methods: quic-go must not find the UDP socket's own (ReadMsgUDP).
type redirect struct {
	conn   *net.UDPConn
	via    net.Addr
	server net.Addr
}

func (r *redirect) WriteTo(b []byte, addr net.Addr) (int, error) {
	return r.conn.WriteTo(b, r.via)
}

func (r *redirect) ReadFrom(b []byte) (int, net.Addr, error) {
	n, _, err := r.conn.ReadFrom(b)
	return n, r.server, err
}

func (r *redirect) Close() error                       { return r.conn.Close() }
func (r *redirect) LocalAddr() net.Addr                { return r.conn.LocalAddr() }
func (r *redirect) SetDeadline(t time.Time) error      { return r.conn.SetDeadline(t) }
func (r *redirect) SetReadDeadline(t time.Time) error  { return r.conn.SetReadDeadline(t) }
func (r *redirect) SetWriteDeadline(t time.Time) error { return r.conn.SetWriteDeadline(t) }

var errUnsupported = errors.New("unsupported")

func sawRetry(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.sqlog"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), `"packet_type":"retry"`) {
			return true
		}
	}
	return false
}

func main() {
	if len(os.Args) != 3 {
		fmt.Println("usage: quic-interop-go CASE BASE_URL")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := run(ctx, os.Args[1], os.Args[2])
	switch {
	case errors.Is(err, errUnsupported):
		fmt.Println("unsupported")
		os.Exit(127)
	case err != nil:
		fmt.Println("fail:", err)
		os.Exit(1)
	}
	fmt.Println("ok")
}
