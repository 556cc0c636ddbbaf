package admission

import (
	"io"
	"net/http"

	"github.com/keyhouse/keyhouse/gateway/internal/flatjson"
	"github.com/keyhouse/keyhouse/gateway/internal/ratelimit"
)

// maxPeekBytes is the largest declared body whose key is read the cheap way (peekLicense);
// a larger or chunked one goes through ratelimit.LicenseKey as before.
const maxPeekBytes = 16 << 10

// peekLicense returns the license key a POST body names, and the body as read when the
// key was read the plain way (cut: all of it but its last byte; nil otherwise), for the
// cache to read the rest of the request's question from (Options.AnswersFromMemory),
// reading all of the body but its last byte. net/http
// starts a background read of the connection (a goroutine, a read that blocks, a wake-up
// when the handler ends) as soon as a handler has read a request body to its end; a
// refusal that never reaches that end costs none of it, and net/http discards the unread
// byte itself before the connection's next request. The body is put back whole for the
// next handler (rest reads it as the client sent it), which reads it to its end as before.
//
// The key is the value of the first member named "key" when every member up to it is a
// plain string (what every client sends, scanned without encoding/json); anything else
// is read to the end and decoded as the rate limiter does (ratelimit.KeyInJSON). A body
// whose key is misread only counts against another fair share, which a client could
// choose anyway by naming another key.
func peekLicense(r *http.Request) (key, cut []byte) {
	n := r.ContentLength
	if n < 2 || n > maxPeekBytes || r.Header.Get("Content-Encoding") != "" {
		return []byte(ratelimit.LicenseKey(r)), nil
	}
	body := r.Body
	head := make([]byte, n-1, n)
	read, err := io.ReadFull(body, head)
	if err != nil {
		// A short body: the next handler gets what came and the same error after it.
		r.Body = &prefixedBody{head: head[:read], rest: body, err: err, ended: true}
		return nil, nil
	}
	if key, ok := plainKey(head); ok {
		r.Body = &prefixedBody{head: head, rest: body}
		return key, head[:len(head):len(head)]
	}
	// Not the plain shape: read the last byte too, and decode.
	last, err := io.ReadAll(body)
	whole := append(head, last...)
	r.Body = &prefixedBody{head: whole, rest: body, err: err, ended: true}
	if err != nil {
		return nil, nil
	}
	return []byte(ratelimit.KeyInJSON(whole)), nil
}

// prefixedBody is a request body of which head has been read already: it reads head,
// then the rest of the client's body (or, once that has ended, err or io.EOF).
type prefixedBody struct {
	head  []byte
	rest  io.ReadCloser
	ended bool
	err   error
}

func (b *prefixedBody) Read(p []byte) (int, error) {
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	if !b.ended {
		return b.rest.Read(p)
	}
	if b.err != nil {
		return 0, b.err
	}
	return 0, io.EOF
}

func (b *prefixedBody) Close() error { return b.rest.Close() }

// plainKey finds the value of the first member named "key" at the start of a JSON object
// whose members up to it are names and values of printable ASCII without `"` or `\`. ok
// is false when anything else comes before the key. body may be cut short anywhere after
// the key's value.
func plainKey(body []byte) (key []byte, ok bool) {
	i := flatjson.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, false
	}
	i++
	for {
		name, next, plain := flatjson.PlainString(body, flatjson.SkipSpace(body, i))
		if plain {
			i = flatjson.SkipSpace(body, next)
			plain = i < len(body) && body[i] == ':'
		}
		var value []byte
		if plain {
			value, next, plain = flatjson.PlainString(body, flatjson.SkipSpace(body, i+1))
		}
		if !plain {
			return nil, false
		}
		if string(name) == "key" {
			return value, true
		}
		i = flatjson.SkipSpace(body, next)
		if i >= len(body) || body[i] != ',' {
			return nil, false
		}
		i++
	}
}
