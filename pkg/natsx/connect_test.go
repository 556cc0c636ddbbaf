package natsx

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A NATS_URL that does not parse is refused at startup with an error naming the variable,
// never the URL, whose password url.Parse's error would quote.
func TestAnUnparsableURLIsRefusedWithoutItsPassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"nats://u:s3cretpass@host:42x2",
		"nats://u:s3cretpass@host:4222,nats://u:s3cretpass@other:42x2",
		"nats://u:s3cretpass%zz@host:4222",
		"nats://u:s3cretpass@ho\x7fst:4222",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		nc, _, err := Connect(ctx, u, "test", nil)
		cancel()
		if err == nil {
			nc.Close()
			t.Fatalf("%q: connected", u)
		}
		if strings.Contains(err.Error(), "s3cretpass") || !strings.Contains(err.Error(), "NATS_URL is not a valid nats:// URL") {
			t.Errorf("%q: error %q, want one naming NATS_URL and not the password", u, err)
		}
	}
}
