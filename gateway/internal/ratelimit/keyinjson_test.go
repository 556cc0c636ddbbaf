package ratelimit

import (
	"testing"

	"github.com/keyhouse/keyhouse/gateway/internal/flatjson"
	"github.com/keyhouse/keyhouse/gateway/internal/flatjson/flatjsontest"
)

// keyBodies are request bodies the per-key limit reads: the plain ones KeyInJSON reads
// without encoding/json, and near misses it must leave to it.
var keyBodies = []string{
	`{"key":"KH-ABCD-EFGH","instance_id":"host-1"}`, `{}`, ` { "key" : "A" } `, `{"key":""}`,
	`{"key":"A","key":"B"}`, `{"KEY":"A"}`, `{"Key":"A","key":"B"}`, `{"other":"x"}`, `{"key":"A",}`,
	`{"key":"A"`, `{"key":"A"} x`, `{"key":"A"}{}`, `{"key":5}`, `{"key":null}`, `{"key":["A"]}`,
	`{"key":"a\nb"}`, `{"key":"a\\nb"}`, `{"key":"\u0041"}`, `{"k\u0065y":"A"}`, `{"key":"é"}`,
	"{\"key\":\"\xff\"}", "{\"key\":\"a\x01\"}", `[]`, `"key"`, `null`, `{"key":"A","key":5}`,
	`{"key":"A","metric":"seats","increment":2}`,
}

var keyFragments = []string{
	`{`, `}`, `"key"`, `"Key"`, `"token"`, `"instance_id"`, `:`, `,`, ` `, "\n", `"A"`, `"KH-1"`, `""`,
	`5`, `null`, `"a\"b"`, `"\u0041"`, "\"\x01\"", `"é"`, "\"\xff\"", `[`, `]`,
}

// KeyInJSON reads every body as encoding/json does: the plain ones (which it reads by
// hand) and the others alike, so the per-key limit counts the same license either way.
func TestKeyInJSONReadsEveryBodyAsEncodingJSON(t *testing.T) {
	plain := 0
	check := func(body string) {
		t.Helper()
		if got, want := KeyInJSON([]byte(body)), keyInJSONDecoded([]byte(body)); got != want {
			t.Fatalf("KeyInJSON(%q) = %q, encoding/json reads %q", body, got, want)
		}
		if flatjson.Object([]byte(body), func(_, _ []byte) bool { return true }) {
			plain++
		}
	}
	for _, body := range keyBodies {
		check(body)
	}
	for body := range flatjsontest.Bodies(9, 20000, 10, keyFragments) {
		check(body)
	}
	if plain < 10 {
		t.Fatalf("only %d bodies were read by hand: the comparison proves nothing", plain)
	}
}

func FuzzKeyInJSON(f *testing.F) {
	for _, body := range keyBodies {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if got, want := KeyInJSON([]byte(body)), keyInJSONDecoded([]byte(body)); got != want {
			t.Fatalf("KeyInJSON(%q) = %q, encoding/json reads %q", body, got, want)
		}
	})
}

func BenchmarkKeyInJSON(b *testing.B) {
	body := []byte(`{"key":"KH-7Q2M-9XKD-4TRW-HJ6P","instance_id":"host-1"}`)
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			_ = KeyInJSON(body)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			_ = keyInJSONDecoded(body)
		}
	})
}
