package edge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawExchange writes request bytes on a fresh connection and reads the one answer.
func rawExchange(t *testing.T, addr, request string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// net/http's own refusals, made before any handler runs, answer JSON with their status;
// what handlers answer (a text/plain http.Error included) passes unchanged.
func TestNetHTTPsOwnErrorsAnswerJSON(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain" {
			http.Error(w, "400 Bad Request", http.StatusBadRequest)
			return
		}
		writeError(w, http.StatusNotFound, "Not found", nil)
	}), ReadHeaderTimeout: time.Minute, MaxHeaderBytes: 4096}
	go func() { _ = srv.Serve(JSONProtocolErrors(lis)) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := lis.Addr().String()

	for _, tc := range []struct {
		name, request string
		status        int
		body          string
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", 400, `{"error":"Bad request"}`},
		{"malformed header line", "GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, `{"error":"Bad request"}`},
		{"no Host header", "GET / HTTP/1.1\r\n\r\n", 400, `{"error":"Bad request: missing required Host header"}`},
		{"malformed Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, `{"error":"Bad request: malformed Host header"}`},
		{"invalid header name", "GET / HTTP/1.1\r\nHost: x\r\nBad\x01Name: 1\r\n\r\n", 400, `{"error":"Bad request"}`},
		{"NUL in a header value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400, `{"error":"Bad request"}`},
		{"bad HTTP version", "GET / HTTP/2.7\r\nHost: x\r\n\r\n", 505, `{"error":"HTTP version not supported: unsupported protocol version"}`},
		{"unknown transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: zip\r\n\r\n", 501, `{"error":"Not implemented"}`},
		{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", 431, `{"error":"Request header fields too large"}`},
		{"a handler's own answer", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, `{"error":"Not found"}`},
		{"a handler's text/plain answer", "GET /plain HTTP/1.1\r\nHost: x\r\n\r\n", 400, "400 Bad Request\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, addr, tc.request)
			if resp.StatusCode != tc.status || body != tc.body {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, body, tc.status, tc.body)
			}
			if strings.HasPrefix(tc.body, "{") && resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
		})
	}
}

// The rewrite never turns bytes that are not one of net/http's own answers into something
// else, and what it writes is always one HTTP answer with an {"error": …} body.
func FuzzRewriteProtocolError(f *testing.F) {
	f.Add([]byte("HTTP/1.1 400 Bad Request" + protocolErrorHeaders + "400 Bad Request"))
	f.Add([]byte("HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version" + protocolErrorHeaders + "505 HTTP Version Not Supported: unsupported protocol version"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}"))
	f.Add([]byte("HTTP/1.1 999 Nope" + protocolErrorHeaders + "x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, ok := rewriteProtocolError(b)
		if !ok {
			if out != nil {
				t.Fatalf("refused but wrote %q", out)
			}
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("rewrote %q into an unreadable answer %q: %v", b, out, err)
		}
		body, _ := io.ReadAll(resp.Body)
		var e map[string]string
		if json.Unmarshal(body, &e) != nil || len(e) != 1 || e["error"] == "" || resp.StatusCode < 400 {
			t.Fatalf("rewrote %q into %d %q", b, resp.StatusCode, body)
		}
	})
}
