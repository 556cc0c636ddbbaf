package signing

import (
	"bytes"
	"errors"
	"testing"
)

var testAESKey = []byte("0123456789abcdef0123456789abcdef")

func TestSealOpen(t *testing.T) {
	pt := []byte(`{"key":"KH-1","issued_to":"acme"}`)
	blob, err := Seal(testAESKey, pt)
	if err != nil {
		t.Fatal(err)
	}
	if len(blob) != len(pt)+SealOverhead || string(blob[:4]) != "KHL1" {
		t.Fatalf("blob layout: len %d, header %q", len(blob), blob[:4])
	}
	if bytes.Contains(blob, []byte("acme")) {
		t.Fatal("plaintext visible in sealed blob")
	}
	got, err := Open(testAESKey, blob)
	if err != nil || !bytes.Equal(got, pt) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	blob2, _ := Seal(testAESKey, pt)
	if bytes.Equal(blob, blob2) {
		t.Fatal("two seals of the same plaintext are identical: nonce not random")
	}
	if empty, _ := Seal(testAESKey, nil); func() bool { p, err := Open(testAESKey, empty); return err != nil || p == nil || len(p) != 0 }() {
		t.Fatal("empty plaintext does not round-trip to an empty slice")
	}

	otherKey := bytes.Repeat([]byte{7}, 32)
	v2 := append([]byte("KHL2"), blob[4:]...)
	flipNonce := bytes.Clone(blob)
	flipNonce[5] ^= 1
	flipCT := bytes.Clone(blob)
	flipCT[len(flipCT)-20] ^= 0x80
	flipTag := bytes.Clone(blob)
	flipTag[len(flipTag)-1] ^= 1
	tests := []struct {
		name string
		key  []byte
		blob []byte
		want error
	}{
		{"nil blob is malformed", testAESKey, nil, ErrMalformed},
		{"shorter than header+nonce+tag is malformed", testAESKey, blob[:SealOverhead-1], ErrMalformed},
		{"unknown magic is malformed", testAESKey, append([]byte("XXXX"), blob[4:]...), ErrMalformed},
		{"unknown version is malformed", testAESKey, v2, ErrMalformed},
		{"base64 text instead of bytes is malformed", testAESKey, []byte("S0hMMQ" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), ErrMalformed},
		{"modified nonce is tampered", testAESKey, flipNonce, ErrTampered},
		{"modified ciphertext is tampered", testAESKey, flipCT, ErrTampered},
		{"modified tag is tampered", testAESKey, flipTag, ErrTampered},
		{"truncated by one byte is tampered", testAESKey, blob[:len(blob)-1], ErrTampered},
		{"extra byte is tampered", testAESKey, append(bytes.Clone(blob), 0), ErrTampered},
		{"other key is tampered", otherKey, blob, ErrTampered},
		{"short key is a key error", testAESKey[:16], blob, ErrKeySize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Open(tc.key, tc.blob)
			if !errors.Is(err, tc.want) || got != nil {
				t.Fatalf("Open = %q, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := Seal(testAESKey[:31], pt); !errors.Is(err, ErrKeySize) {
		t.Fatalf("Seal with 31-byte key = %v", err)
	}
}

func FuzzOpen(f *testing.F) {
	valid, _ := Seal(testAESKey, []byte(`{"key":"KH-1"}`))
	f.Add(valid, uint16(0), byte(1), uint16(3))
	f.Add([]byte("KHL1"), uint16(40), byte(0x80), uint16(0))
	f.Add([]byte{}, uint16(7), byte(0), uint16(100))
	f.Fuzz(func(t *testing.T, data []byte, pos uint16, flip byte, cut uint16) {
		// Arbitrary input: never panics, only the documented errors.
		if _, err := Open(testAESKey, data); err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTampered) {
			t.Fatalf("Open(arbitrary) = %v", err)
		}
		// data as plaintext: round-trips, and any modification is refused.
		blob, err := Seal(testAESKey, data)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Open(testAESKey, blob); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round trip: %q, %v", got, err)
		}
		if flip == 0 {
			flip = 1
		}
		i := int(pos) % len(blob)
		mod := bytes.Clone(blob)
		mod[i] ^= flip
		wantErr := ErrTampered
		if i < 4 {
			wantErr = ErrMalformed
		}
		if got, err := Open(testAESKey, mod); !errors.Is(err, wantErr) {
			t.Fatalf("byte %d ^ %#x: Open = %q, %v; want %v", i, flip, got, err, wantErr)
		}
		n := int(cut) % len(blob)
		wantErr = ErrTampered
		if n < SealOverhead {
			wantErr = ErrMalformed
		}
		if got, err := Open(testAESKey, blob[:n]); !errors.Is(err, wantErr) {
			t.Fatalf("truncated to %d: Open = %q, %v; want %v", n, got, err, wantErr)
		}
		if got, err := Open(testAESKey, append(bytes.Clone(blob), flip)); !errors.Is(err, ErrTampered) {
			t.Fatalf("appended byte: Open = %q, %v", got, err)
		}
	})
}
