package edge

import (
	"github.com/keyhouse/keyhouse/gateway/internal/flatjson"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
)

// plainValidateRequest reads validate-license's body without encoding/json when it is
// the plain case every client sends: one flat object of string members, names and
// values printable ASCII without escapes, key and instance_id at most once (other
// members are ignored, as encoding/json's reading ignores them). done is false for
// anything else, which genericValidateRequest (encoding/json) reads as it always has;
// for a plain body both give the same request (TestPlainValidateRequestReadsAsGeneric). It was 3% of the
// gateway's samples under validate-license's uniform row.
func plainValidateRequest(body []byte) (req *activationsv1.ValidateLicenseRequest, done bool) {
	var key, instance []byte
	var seenKey, seenInstance bool
	plain := flatjson.Object(body, func(name, value []byte) bool {
		switch string(name) {
		case "key":
			if seenKey {
				return false // encoding/json keeps the last: left to it
			}
			seenKey, key = true, value
		case "instance_id":
			if seenInstance {
				return false
			}
			seenInstance, instance = true, value
		}
		return true
	})
	if !plain {
		return nil, false
	}
	if len(key) == 0 || len(instance) == 0 {
		return nil, true
	}
	return &activationsv1.ValidateLicenseRequest{Key: string(key), InstanceId: string(instance)}, true
}
