package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// handleError writes any error of a REST call as {"error": "..."} with its siblings.
func handleError(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	switch tooLarge, timedOut := bodyFailure(r); {
	case tooLarge:
		writeError(w, http.StatusRequestEntityTooLarge, "Request body too large", nil)
		return
	case timedOut:
		// The client stopped sending its body: its fault, not a server timeout (503).
		writeError(w, http.StatusRequestTimeout, "Request body not received in time", nil)
		return
	}
	st := status.Convert(err)
	code := apierr.HTTPStatus(st)
	// The console's pages show the same text (apierr.PublicMessage): a transport
	// failure's names no internal address, a 500's is the one InternalMessage.
	msg := apierr.PublicMessage(ctx, st)
	if st.Code() == codes.InvalidArgument {
		msg = cleanDecodeError(msg)
	}
	var fields *apiv1.ErrorFields
	for _, d := range st.Details() {
		if f, ok := d.(*apiv1.ErrorFields); ok {
			fields = f
		}
	}
	writeError(w, code, msg, fields)
}

var queryParamError = regexp.MustCompile(`^parsing field "([A-Za-z0-9_.]+)": `)

// protojson separates its prefix with a space or, in some builds, a no-break space
// (deliberately unstable output), so both count as space here.
var protoPosition = regexp.MustCompile(`^proto:[\s\x{00a0}]*(syntax error[\s\x{00a0}]*)?(\(line \d+:\d+\):[\s\x{00a0}]*)?`)

// cleanDecodeError turns protojson's decode errors ("proto: (line 1:9): invalid value
// for string field key: 5") into a message that names the field without parser noise.
func cleanDecodeError(msg string) string {
	switch {
	case msg == "unexpected EOF":
		return "Invalid JSON body: unexpected end of input"
	case queryParamError.MatchString(msg):
		// grpc-gateway's query decoding: `parsing field "limit": strconv.ParseInt: …`.
		return "Invalid value for query parameter " + queryParamError.FindStringSubmatch(msg)[1]
	case !strings.HasPrefix(msg, "proto:"):
		return msg
	}
	rest := protoPosition.ReplaceAllString(msg, "")
	rest = jsonFieldName.ReplaceAllStringFunc(rest, func(m string) string {
		return "field " + snakeCase(strings.TrimPrefix(m, "field "))
	})
	return "Invalid JSON body: " + rest
}

// protojson names a field by its lowerCamelCase JSON name ("instanceId"); every request
// field of api.md is snake_case, which is the name the client sent.
var jsonFieldName = regexp.MustCompile(`field [a-z][A-Za-z0-9]*`)

func snakeCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func handleRoutingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, code int) {
	switch code {
	case http.StatusMethodNotAllowed:
		writeError(w, http.StatusMethodNotAllowed, "Method not allowed", nil)
	case http.StatusBadRequest:
		writeError(w, http.StatusBadRequest, "Bad request", nil)
	default:
		writeError(w, http.StatusNotFound, "Not found", nil)
	}
}

// writeError writes {before..., "error": msg, after...}.
func writeError(w http.ResponseWriter, code int, msg string, fields *apiv1.ErrorFields) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for _, f := range fields.GetBefore() {
		writeField(&buf, f.GetName(), json.RawMessage(f.GetJsonValue()))
		buf.WriteByte(',')
	}
	writeField(&buf, "error", capMessage(msg))
	for _, f := range fields.GetAfter() {
		buf.WriteByte(',')
		writeField(&buf, f.GetName(), json.RawMessage(f.GetJsonValue()))
	}
	buf.WriteByte('}')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func writeField(buf *bytes.Buffer, name string, value any) {
	k, _ := json.Marshal(name)
	v, err := json.Marshal(value)
	if err != nil {
		v = []byte("null")
	}
	buf.Write(k)
	buf.WriteByte(':')
	buf.Write(v)
}
