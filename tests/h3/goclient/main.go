// An HTTP/3 client on quic-go for spate's tests (tests/h3_interop.rs): fetches URLs over one QUIC
// connection, all at once, and prints one line per response (status, protocol, length,
// SHA-256 of the body) and a last line on the connection (TLS resumption, Retry seen).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
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

type result struct {
	URL    string
	Status int
	Proto  string
	Len    int64
	SHA256 string
	AltSvc string
	Error  string
}

// line: one output line, the kind and then tab-separated key=value pairs (tests/h3_interop.rs reads them).
func (r result) line() string {
	s := fmt.Sprintf("response\tstatus=%d\tproto=%s\tlen=%d\tsha256=%s", r.Status, r.Proto, r.Len, r.SHA256)
	if r.AltSvc != "" {
		s += "\talt_svc=" + r.AltSvc
	}
	if r.Error != "" {
		s += "\terror=" + strings.ReplaceAll(r.Error, "\t", " ")
	}
	return s + "\turl=" + r.URL
}

func main() {
	window := flag.Uint64("window", 0, "stream and connection receive window in bytes (0: quic-go's defaults)")
	postSize := flag.Int("post", -1, "POST a body of this many bytes (the pattern byte i = i*7 mod 251) instead of GET")
	resume := flag.Bool("resume", false, "after the fetches, open a second connection and fetch the first URL again, resuming TLS")
	timeout := flag.Duration("timeout", 60*time.Second, "overall time limit")
	flag.Parse()
	urls := flag.Args()

	qlogDir, err := os.MkdirTemp("", "h3client-qlog")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(qlogDir)
	os.Setenv("QLOGDIR", qlogDir)

	tlsConf := &tls.Config{
		InsecureSkipVerify: true, // the tests' certificates are self-signed
		ClientSessionCache: tls.NewLRUClientSessionCache(4),
		NextProtos:         []string{http3.NextProtoH3},
	}
	quicConf := &quic.Config{Tracer: qlog.DefaultConnectionTracer, MaxIncomingStreams: 1000}
	if *window > 0 {
		quicConf.InitialStreamReceiveWindow = *window
		quicConf.MaxStreamReceiveWindow = *window
		quicConf.InitialConnectionReceiveWindow = *window
		quicConf.MaxConnectionReceiveWindow = *window
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	tr := &http3.Transport{TLSClientConfig: tlsConf, QUICConfig: quicConf}
	results := make([]result, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = fetch(ctx, tr, u, *postSize)
		}()
	}
	wg.Wait()
	tr.Close()
	for _, r := range results {
		fmt.Println(r.line())
	}

	resumed := false
	if *resume && len(urls) > 0 {
		tr2 := &http3.Transport{TLSClientConfig: tlsConf, QUICConfig: quicConf}
		r, st := fetch(ctx, tr2, urls[0], -1)
		tr2.Close()
		if r.Error != "" {
			fmt.Println(r.line())
		}
		resumed = st != nil && st.DidResume
	}
	time.Sleep(100 * time.Millisecond) // the qlog writer flushes when its connection closes
	fmt.Printf("summary\tresumed=%t\tretry=%t\n", resumed, sawRetry(qlogDir))
}

func fetch(ctx context.Context, tr *http3.Transport, url string, postSize int) (result, *tls.ConnectionState) {
	r := result{URL: url}
	var req *http.Request
	var err error
	if postSize >= 0 {
		body := make([]byte, postSize)
		for i := range body {
			body[i] = byte(i * 7 % 251)
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	} else {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	}
	if err != nil {
		r.Error = err.Error()
		return r, nil
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		r.Error = err.Error()
		return r, nil
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		r.Error = err.Error()
	}
	r.Status, r.Proto, r.Len = resp.StatusCode, resp.Proto, n
	r.SHA256 = hex.EncodeToString(h.Sum(nil))
	r.AltSvc = resp.Header.Get("Alt-Svc")
	return r, resp.TLS
}

// sawRetry: did any connection receive a Retry packet (from the client's qlog files)?
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

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}
