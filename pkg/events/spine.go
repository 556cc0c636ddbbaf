package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The event stream: every service's relay publishes its events on Subject(type) =
// SubjectPrefix + type, which Stream captures.
const (
	Stream        = "KEYHOUSE_EVENTS"
	SubjectPrefix = "keyhouse.events."
	// StreamMaxAge is how long the stream keeps an event, so a consumer that was down (the
	// event log, the seat purge) catches up from there; a week covers any sane outage.
	StreamMaxAge = 7 * 24 * time.Hour
)

// StreamConfig is the stream every emitting service ensures at start (EnsureStream).
var StreamConfig = jetstream.StreamConfig{
	Name:     Stream,
	Subjects: []string{SubjectPrefix + ">"},
	Storage:  jetstream.FileStorage,
	MaxAge:   StreamMaxAge,
	// The relay re-publishes a row whose "sent" mark was lost; the window drops that copy.
	Duplicates: 10 * time.Minute,
}

// EnsureStream creates the event stream with replicas copies (NATS_STREAM_REPLICAS; 0
// keeps an existing stream's count, natsx.KeepReplicas), or updates it when its
// configuration differs from StreamConfig (a rollout that changed it). Every emitting
// process calls it at start, so it creates rather than updates: JetStream answers a
// create identical to the stream with success and leaves the stream alone, where an
// update, even to the same configuration, rewrites the stream's store while other
// processes are creating their consumers on it.
func EnsureStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	cfg := StreamConfig
	cfg.Replicas = replicas
	cfg, err := natsx.KeepReplicas(ctx, js, cfg)
	if err != nil {
		return err
	}
	_, err = js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return natsx.EnsureStream(ctx, js, cfg)
	}
	if err != nil {
		return fmt.Errorf("events: create stream %s: %w", Stream, err)
	}
	return nil
}

// Notifier is what the post-commit path wakes: the service's outbox relay.
type Notifier interface{ Notify() }

// Spine is one process's side of the event spine: the post-commit path of every
// transaction that emits. A nil *Spine runs transactions with no post-commit path (unit
// tests of a store); the events are written all the same.
type Spine struct {
	relay Notifier
	nc    *nats.Conn
	log   *slog.Logger
	local []func(*eventsv1.Event)
}

// Option configures a Spine.
type Option func(*Spine)

// WithRelay wakes relay after every commit that emitted, so events go out at once instead
// of at its next poll.
func WithRelay(relay Notifier) Option { return func(s *Spine) { s.relay = relay } }

// WithFastPath publishes, after every commit, the core-NATS messages other processes'
// caches follow (FastPath). They are at most once and carry only keys; the durable
// record is the event itself.
func WithFastPath(nc *nats.Conn) Option { return func(s *Spine) { s.nc = nc } }

// WithLocal runs f for every event this process committed, before the call that made the
// change answers: how a process drops its own caches at once.
func WithLocal(f func(*eventsv1.Event)) Option {
	return func(s *Spine) { s.local = append(s.local, f) }
}

// WithLog sets the logger for fast-path failures.
func WithLog(log *slog.Logger) Option { return func(s *Spine) { s.log = log } }

// NewSpine makes a process's spine.
func NewSpine(opts ...Option) *Spine {
	s := &Spine{log: slog.Default()}
	for _, o := range opts {
		o(s)
	}
	return s
}

type pendingKey struct{}

// pending collects the events Emit wrote in one transaction.
type pending struct {
	mu     sync.Mutex
	events []*eventsv1.Event
}

func (p *pending) add(evs ...*eventsv1.Event) {
	p.mu.Lock()
	p.events = append(p.events, evs...)
	p.mu.Unlock()
}

// InTx runs fn in a transaction on pool, then the post-commit path for the events fn
// emitted (with the ctx fn got).
func (s *Spine) InTx(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, done := s.Track(ctx)
	err := pgxx.InTx(ctx, pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
	done(err)
	return err
}

// Pipelined runs a transaction sent as pipelines (pgx batches) instead of one round trip
// per statement, with the post-commit path for the events it queues (QueueAll with the
// ctx it is given). first fills a batch that begins with BEGIN. When then is nil, COMMIT
// ends that batch and the whole transaction is one round trip (a change whose statements
// and events are known before any runs: an issued license). Otherwise the first batch is
// sent and read, then fills a second batch from what the first's callbacks recorded,
// which COMMIT ends: two round trips. An error anywhere leaves nothing committed, and the
// connection goes back to the pool outside any transaction.
func (s *Spine) Pipelined(ctx context.Context, pool *pgxpool.Pool, first, then func(ctx context.Context, b *pgx.Batch) error) (err error) {
	ctx, done := s.Track(ctx)
	defer func() { done(err) }()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if err := first(ctx, b); err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
			// A connection left inside a transaction is destroyed by Release anyway; the
			// rollback only saves a reconnect.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = conn.Exec(rctx, "ROLLBACK")
			cancel()
		}
		conn.Release()
	}()
	if then != nil {
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
		if err := then(ctx, b); err != nil {
			return err
		}
	}
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			// An aborted transaction's COMMIT answers ROLLBACK, not an error.
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	return conn.SendBatch(ctx, b).Close()
}

// Track is InTx for a transaction someone else runs (pkg/idempotency's): emit with the ctx
// it returns, and call done with the transaction's outcome once it ended.
func (s *Spine) Track(ctx context.Context) (context.Context, func(err error)) {
	p := &pending{}
	ctx = context.WithValue(ctx, pendingKey{}, p)
	return ctx, func(err error) {
		p.mu.Lock()
		evs := p.events
		p.events = nil
		p.mu.Unlock()
		s.committed(ctx, evs, err)
	}
}

// errNotEmitted marks Announce's events: no relay has rows to send for them.
var errNotEmitted = errors.New("events: announced, not emitted")

// Announce runs the post-commit cache path for changes a committed transaction made
// without emitting their events: a tenant's purge (pkg/tenantpurge) removes licenses,
// seats and releases no one is left to be told about, yet every cached answer about them
// must still go stale within its bound. The events are built, never written.
func (s *Spine) Announce(ctx context.Context, evs ...*eventsv1.Event) {
	s.committed(ctx, evs, errNotEmitted)
}

// committed is the one post-commit path. The cache drops run even when err is set: a
// failed commit may have committed (its answer was lost), and a needless drop costs one
// read. The relay is woken only for a commit known to have happened (else it finds the
// rows at its next poll).
func (s *Spine) committed(ctx context.Context, evs []*eventsv1.Event, err error) {
	if len(evs) == 0 {
		return
	}
	var changed, seatsRemoved []string
	releases := false
	for _, ev := range evs {
		if s != nil {
			for _, f := range s.local {
				f(ev)
			}
		}
		key, kind := fastPath(ev)
		switch kind {
		case fastLicense:
			licensecache.AnnounceLicenseChangedInCall(ctx, key)
			if !slices.Contains(changed, key) {
				changed = append(changed, key)
			}
		case fastSeat:
			licensecache.AnnounceInCall(ctx, key)
			if !slices.Contains(seatsRemoved, key) {
				seatsRemoved = append(seatsRemoved, key)
			}
		case fastReleases:
			if !releases {
				licensecache.AnnounceClearInCall(ctx)
			}
			releases = true
		}
	}
	if s == nil {
		return
	}
	if s.nc != nil {
		s.publish(license.ChangedSubject, changed...)
		s.publish(license.SeatRemovedSubject, seatsRemoved...)
		if releases {
			s.publish(license.ReleasesChangedSubject, "")
		}
	}
	if err == nil && s.relay != nil {
		s.relay.Notify()
	}
}

func (s *Spine) publish(subject string, keys ...string) {
	if len(keys) == 0 {
		return
	}
	if err := licensecache.PublishOn(s.nc, subject, keys...); err != nil {
		s.log.Warn("change not announced on the fast path; other processes serve cached answers until they expire",
			"subject", subject, "error", err.Error())
	}
}

type fastKind int

const (
	fastNone fastKind = iota
	// fastLicense: a license row changed (license.ChangedSubject, the key).
	fastLicense
	// fastSeat: a seat went away (license.SeatRemovedSubject, the key).
	fastSeat
	// fastReleases: the releases changed (license.ReleasesChangedSubject).
	fastReleases
)

// fastPath is which cached answers an event makes stale: the one table of it.
func fastPath(ev *eventsv1.Event) (string, fastKind) {
	switch ev.Type {
	case TypeLicenseRevoked, TypeLicenseReactivated, TypeLicenseDeleted, TypeLicenseTermsUpdated, TypeLicenseNotesUpdated:
		return LicenseKey(ev), fastLicense
	case TypeSeatDeactivated:
		return LicenseKey(ev), fastSeat
	case TypeReleasePublished, TypeReleaseUnpublished:
		return "", fastReleases
	}
	return "", fastNone
}

// ChangedLicense is the key of the license row an event changed, or "": what a process
// that caches license rows drops (WithLocal).
func ChangedLicense(ev *eventsv1.Event) string {
	if key, kind := fastPath(ev); kind == fastLicense {
		return key
	}
	return ""
}

// ChangedReleases says whether an event changed which release is the latest of a channel
// (license.ReleasesChangedSubject's events): what a process that caches release lookups
// empties (WithLocal).
func ChangedReleases(ev *eventsv1.Event) bool {
	_, kind := fastPath(ev)
	return kind == fastReleases
}
