package edge

import (
	"net/http"

	"github.com/keyhouse/keyhouse/pkg/grpcx"
)

// WriteOverloaded writes the 503 of a request the gateway refused because it is at its
// concurrency limit (gateway/internal/admission): the same body as any other 503 of a
// dependency that could not take the call, {"error":"Service unavailable, retry"}.
func WriteOverloaded(w http.ResponseWriter) {
	writeError(w, http.StatusServiceUnavailable, grpcx.ServiceUnavailable, nil)
}
