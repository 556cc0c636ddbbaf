package server

import (
	"strings"
	"testing"
)

func TestConsolePasswordsAreArgon2idAndCheckedByTheirOwnParameters(t *testing.T) {
	h := hashPassword("correct horse battery staple")
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, "horse") {
		t.Fatalf("hash %q", h)
	}
	if h == hashPassword("correct horse battery staple") {
		t.Fatal("two hashes of one password must differ (random salt)")
	}
	if !checkPassword(h, "correct horse battery staple") {
		t.Fatal("the password does not check against its own hash")
	}
	for _, wrong := range []string{"", "correct horse battery stapl", "Correct horse battery staple"} {
		if checkPassword(h, wrong) {
			t.Fatalf("%q checked", wrong)
		}
	}
	for _, broken := range []string{"", "$argon2i$v=19$m=19456,t=2,p=1$AAAA$AAAA", strings.Replace(h, "m=19456", "m=99999999", 1), "$argon2id$v=19$m=19456,t=2,p=1$!!$!!"} {
		if checkPassword(broken, "correct horse battery staple") {
			t.Fatalf("malformed hash %q accepted", broken)
		}
	}
}
