package edge

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// JSONProtocolErrors makes net/http's own answers JSON (addendum §6: every error body is
// {"error": …}). net/http answers a request it cannot parse (a malformed request line or
// header, a bad Host, headers too large, an unknown transfer coding, an HTTP version it
// does not speak) itself, on the connection, before any handler runs, as text/plain. Each
// conn of l recognises such an answer as it is written (one write of exactly net/http's
// shape: the status line, then "Content-Type: text/plain; charset=utf-8" and "Connection:
// close" in that order, which no answer through http.ResponseWriter has, and a one-line
// body) and writes the same status with a JSON body instead.
func JSONProtocolErrors(l net.Listener) net.Listener { return jsonErrorsListener{l} }

type jsonErrorsListener struct{ net.Listener }

func (l jsonErrorsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorsConn{Conn: c}, nil
}

type jsonErrorsConn struct{ net.Conn }

func (c *jsonErrorsConn) Write(b []byte) (int, error) {
	out, ok := rewriteProtocolError(b)
	if !ok {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// CloseWrite keeps net/http's graceful close of a refused connection (it half-closes
// before hanging up, so the client reads the answer).
func (c *jsonErrorsConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// protocolErrorHeaders is what net/http writes between the status line and the body of
// the answers it makes itself (net/http/server.go).
const protocolErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// rewriteProtocolError returns the JSON form of one of net/http's own plain-text answers,
// or ok false for any other bytes.
func rewriteProtocolError(b []byte) (out []byte, ok bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(b, []byte(proto)) {
		return nil, false
	}
	i := bytes.Index(b, []byte(protocolErrorHeaders))
	if i < 0 {
		return nil, false
	}
	statusLine, body := string(b[len(proto):i]), b[i+len(protocolErrorHeaders):]
	if strings.ContainsAny(statusLine, "\r\n") || bytes.ContainsAny(body, "\r\n") || len(statusLine) < 4 || statusLine[3] != ' ' {
		return nil, false
	}
	code, err := strconv.Atoi(statusLine[:3])
	if err != nil || code < 400 || code > 599 || http.StatusText(code) == "" {
		return nil, false
	}
	msg := sentenceCase(http.StatusText(code))
	// A statusError's detail ("400 Bad Request: missing required Host header") is one of
	// net/http's fixed texts, never the client's bytes.
	if _, detail, found := strings.Cut(statusLine[4:], ": "); found {
		msg += ": " + detail
	}
	errBody, _ := json.Marshal(map[string]string{"error": msg})
	var buf bytes.Buffer
	buf.WriteString(proto + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n")
	buf.WriteString("Content-Type: application/json\r\nConnection: close\r\n")
	buf.WriteString("Content-Length: " + strconv.Itoa(len(errBody)) + "\r\n\r\n")
	buf.Write(errBody)
	return buf.Bytes(), true
}

// sentenceCase writes "Bad Request" as "Bad request", the case of every other error
// message of the API.
func sentenceCase(s string) string {
	words := strings.Split(s, " ")
	for i := 1; i < len(words); i++ {
		if w := words[i]; w != strings.ToUpper(w) { // keep HTTP, URI
			words[i] = strings.ToLower(w)
		}
	}
	return strings.Join(words, " ")
}
