package sweep

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/services/activations/internal/store"
)

// failingStore fails every step for the first rounds, then works; it ends the run at
// round last.
type failingStore struct {
	mu            sync.Mutex
	round         int
	failing, last int
	cancel        context.CancelFunc
}

var errGone = errors.New("dial tcp: connection refused")

func (f *failingStore) fail() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.round <= f.failing {
		return errGone
	}
	return nil
}

func (f *failingStore) RescheduleRenewed(context.Context, int) (int, error) {
	f.mu.Lock()
	f.round++
	if f.round == f.last {
		f.cancel()
	}
	f.mu.Unlock()
	return 0, f.fail()
}

func (f *failingStore) SweepLapsed(context.Context, int, time.Duration) ([]store.LapsedSeat, error) {
	return nil, f.fail()
}

func (f *failingStore) RemoveRetiredLeaseKeys(context.Context) error { return f.fail() }

// A Postgres outage over many sweep rounds is logged once when it starts and once when
// the sweep works again, per step, never once per round.
func TestAnOutageIsLoggedOncePerStepNotOncePerRound(t *testing.T) {
	var logged bytes.Buffer // written by Run, read after it returned
	log := slog.New(slog.NewTextHandler(&logged, nil))
	ctx, cancel := context.WithCancel(context.Background())
	st := &failingStore{failing: 5, last: 8, cancel: cancel}
	Run(ctx, st, time.Millisecond, log)
	out := logged.String()
	if n := strings.Count(out, "level=WARN"); n != 2 {
		t.Errorf("%d WARN lines for an outage of 5 rounds, want 2 (rescheduling, removing lapsed seats):\n%s", n, out)
	}
	for _, want := range []string{`msg="renewed floating seats rescheduled again" failed_rounds=5`, `msg="lapsed floating seats removed again" failed_rounds=5`} {
		if strings.Count(out, want) != 1 {
			t.Errorf("want one %s line:\n%s", want, out)
		}
	}
}
