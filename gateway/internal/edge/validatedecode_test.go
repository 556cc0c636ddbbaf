package edge

import (
	"testing"

	"github.com/keyhouse/keyhouse/gateway/internal/flatjson/flatjsontest"
	"google.golang.org/protobuf/proto"
)

var validateBodyFragments = append([]string{`"instance_id"`, `"instanceId"`, `"host-1"`}, hotRequestFragments...)

// checkPlainValidateAsLenient fails unless the plain reading of body, when it takes it,
// is the generic one's.
func checkPlainValidateAsLenient(t *testing.T, body string) (plain bool) {
	t.Helper()
	got, done := plainValidateRequest([]byte(body))
	if !done {
		return false
	}
	if want := genericValidateRequest([]byte(body)); !proto.Equal(got, want) {
		t.Fatalf("body %q: plain %v, generic %v", body, got, want)
	}
	return true
}

// For every body the plain reader takes, it gives the very request the generic reader
// gives (or none, when that gives none): hand-picked near misses, then 20,000 bodies
// assembled from fragments.
func TestPlainValidateRequestReadsAsGeneric(t *testing.T) {
	bodies := append([]string{
		`{"key":"K-1","instance_id":"host-1"}`, `{"instance_id":"host-1","key":"K-1"}`,
		`{"key":"K-1","instance_id":"host-1","extra":"x"}`, `{"key":"K-1","instance_id":""}`,
		`{"key":"","instance_id":"h"}`, `{"key":"K","key":"L","instance_id":"h"}`,
		`{"key":"K","instance_id":"h","instance_id":"i"}`, `{"key":"K","instanceId":"h"}`,
		`{"key":"K","instance_id":5}`, `{"key":"K","instance_id":null}`, `{"key":"K","extra":1,"instance_id":"h"}`,
	}, hotRequestBodies...)
	plain := 0
	for _, body := range bodies {
		if checkPlainValidateAsLenient(t, body) {
			plain++
		}
	}
	for body := range flatjsontest.Bodies(2, 20000, 12, validateBodyFragments) {
		if checkPlainValidateAsLenient(t, body) {
			plain++
		}
	}
	if plain < 10 {
		t.Fatalf("only %d bodies took the plain reader: the comparison proves nothing", plain)
	}
}

func FuzzPlainValidateRequest(f *testing.F) {
	for _, body := range hotRequestBodies {
		f.Add(body)
	}
	f.Add(`{"key":"K-1","instance_id":"host-1"}`)
	f.Fuzz(func(t *testing.T, body string) {
		checkPlainValidateAsLenient(t, body)
	})
}

func BenchmarkReadValidateRequest(b *testing.B) {
	body := []byte(`{"key":"KH-7Q2M-9XKD-4TRW-HJ6P","instance_id":"ada-laptop"}`)
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			_, _ = plainValidateRequest(body)
		}
	})
	b.Run("generic", func(b *testing.B) {
		for b.Loop() {
			_ = genericValidateRequest(body)
		}
	})
}
