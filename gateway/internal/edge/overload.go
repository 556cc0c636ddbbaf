package edge

import (
	"bytes"
	"net/http"

	"github.com/keyhouse/keyhouse/pkg/apierr"
)

// overloadedBody is the 503 body of any dependency that could not take the call,
// {"error":"Service unavailable, retry"}, built once as writeError builds it.
var overloadedBody = func() []byte {
	var buf bytes.Buffer
	buf.WriteByte('{')
	writeField(&buf, "error", capMessage(apierr.UnavailableMessage))
	buf.WriteByte('}')
	return buf.Bytes()
}()

var jsonContentType = []string{"application/json"}

// WriteOverloaded writes the 503 of a request the gateway refused because it is at its
// concurrency limit (gateway/internal/admission): the same answer as writeError's for
// any other 503 of a dependency that could not take the call, written without building
// it again, since under overload it is most of what the gateway answers.
func WriteOverloaded(w http.ResponseWriter) {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(overloadedBody)
}
