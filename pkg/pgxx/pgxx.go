// Package pgxx opens a service's Postgres pool on its own schema and runs its embedded
// migrations with goose. One database, one schema per service: the pool's search_path is
// the service schema, so a service's SQL names only its own tables.
package pgxx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

var schemaName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// Option tunes the pool Open makes.
type Option func(*pgxpool.Config)

// WithMaxConns sizes the pool (pgx's default is max(4, CPUs)): for a pool whose users
// hold a connection for long, such as a worker's session locks.
func WithMaxConns(n int32) Option { return func(c *pgxpool.Config) { c.MaxConns = max(n, 1) } }

// WithGenericPlans makes the pool's connections plan each prepared statement once, for
// any arguments, and from its indexes (GenericPlanSettings), instead of planning it for
// its arguments whenever Postgres finds the generic plan dearer than the custom ones:
// for a pool whose few statements are written so that their plan does not depend on
// their arguments or on the table's statistics, and cost more to plan than to run.
func WithGenericPlans() Option {
	return func(c *pgxpool.Config) {
		for name, value := range GenericPlanSettings {
			c.ConnConfig.RuntimeParams[name] = value
		}
	}
}

// GenericPlanSettings are the settings of WithGenericPlans' connections. Sequential
// scans are off because a table whose rows come and go (an outbox) has statistics that
// lie by the time a plan runs: analyzed while it was empty (by autovacuum after a quiet
// spell, or by a VACUUM after a bulk load elsewhere in the database), it has no pages
// and no rows for the planner, whose cheapest plan is then a sequential scan for every
// lookup; the connection keeps that plan until the next analyze, while the table fills
// with rows and with the dead ones deleting leaves. The relay's claim so planned read
// 11,079 buffers instead of 317, and took 41% of a core at 1,200 events a second.
// Penalised, a sequential scan is still the plan where no index serves.
var GenericPlanSettings = map[string]string{
	"plan_cache_mode": "force_generic_plan",
	"enable_seqscan":  "off",
}

// Open connects to databaseURL with search_path set to schema.
func Open(ctx context.Context, databaseURL, schema string, opts ...Option) (*pgxpool.Pool, error) {
	if !schemaName.MatchString(schema) {
		return nil, fmt.Errorf("pgxx: invalid schema name %q", schema)
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// The URL may hold a password: never echo it.
		return nil, errors.New("pgxx: DATABASE_URL is not a valid Postgres URL")
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = "keyhouse-" + schema
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A server that accepts TCP but never answers (paused, overloaded) must not hold a
		// new connection forever; requests are bounded by their deadline anyway.
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgxx: connect: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgxx: database unreachable at %s (DATABASE_URL): %w", serverAddrs(cfg.ConnConfig.Config), redact(err))
	}
	return pool, nil
}

// serverAddrs names the servers a URL points at (host:port, or a socket folder), the
// fallbacks of a multi-host URL included: what an operator needs to find which server,
// or which URL, is wrong. Never the user or the password.
func serverAddrs(c pgconn.Config) string {
	addrs := []string{serverAddr(c.Host, c.Port)}
	for _, f := range c.Fallbacks {
		if a := serverAddr(f.Host, f.Port); !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return strings.Join(addrs, ", ")
}

func serverAddr(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", host, port)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// redact keeps of a failed connection what says why and nothing the URL holds: the
// server's own message, or the network's reason (a refused connection, an unknown host,
// a timeout).
func redact(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Errorf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		if why := networkReason(err); why != "" {
			return errors.New("cannot connect to the database server: " + why)
		}
		return errors.New("cannot connect to the database server")
	}
	return err
}

// networkReason is why a dial failed, in the network's words ("connection refused",
// "no such host"), or "" when it was not the network.
func networkReason(err error) string {
	var dnsErr *net.DNSError
	var sysErr *os.SyscallError
	var netErr net.Error
	switch {
	case errors.As(err, &dnsErr):
		return dnsErr.Err
	case errors.As(err, &sysErr):
		return sysErr.Err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "no answer within the connect timeout"
	}
	return ""
}

// Migrations runs the embedded SQL files of one service into its schema, tracking
// versions in <schema>.goose_db_version. Concurrent runs (replicas, a Helm Job) serialize
// on a Postgres advisory lock.
type Migrations struct {
	Schema string
	FS     fs.FS // the *.sql files, at the root of FS
}

func (m Migrations) provider(pool *pgxpool.Pool) (*goose.Provider, *sql.DB, error) {
	db := stdlib.OpenDBFromPool(pool)
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(m.Schema)))
	if err != nil {
		return nil, nil, err
	}
	store, err := database.NewStore(goose.DialectPostgres, m.Schema+".goose_db_version")
	if err != nil {
		return nil, nil, err
	}
	p, err := goose.NewProvider("", db, m.FS, goose.WithStore(store), goose.WithSessionLocker(locker))
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return p, db, nil
}

func lockID(schema string) int64 {
	var h int64 = 0x6b6579686f757365 // "keyhouse"
	for _, c := range schema {
		h = h*31 + int64(c)
	}
	return h
}

// Up creates the schema if needed and applies every pending migration.
func (m Migrations) Up(ctx context.Context, pool *pgxpool.Pool) (applied int, err error) {
	// CREATE SCHEMA IF NOT EXISTS is not safe against itself (two at once: a unique
	// violation on pg_namespace), so replicas migrating together take the migration lock.
	err = InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockID(m.Schema)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{m.Schema}.Sanitize())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("create schema %s: %w", m.Schema, redact(err))
	}
	p, db, err := m.provider(pool)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	res, err := p.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("migrate %s: %w", m.Schema, err)
	}
	return len(res), nil
}

// Apply opens a pool on databaseURL, applies the migrations and closes the pool: a
// one-off run, such as the template database of a test binary (testkit.Template.Migrate).
func (m Migrations) Apply(ctx context.Context, databaseURL string) error {
	pool, err := Open(ctx, databaseURL, m.Schema)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = m.Up(ctx, pool)
	return err
}

// ErrSchemaBehind is returned by Check when migrations are pending.
var ErrSchemaBehind = errors.New("database schema is behind")

// Check refuses a schema that is behind the binary, with a message that says what to run.
// A schema ahead of the binary (a newer release migrated it: this binary is an old
// replica still running during a rolling upgrade, or a rollback) is served, since every
// migration only adds to what older binaries read (docs/operations.md, "Upgrades and
// rollbacks"), and said at WARN on log, so that a rollback's binaries on a newer schema
// are seen.
func (m Migrations) Check(ctx context.Context, pool *pgxpool.Pool, binary string, log *slog.Logger) error {
	p, db, err := m.provider(pool)
	if err != nil {
		return err
	}
	defer db.Close()
	// HasPending takes the session lock; a plain status read does not.
	cur, err := p.GetDBVersion(ctx)
	if err != nil {
		cur = 0
	}
	srcs := p.ListSources()
	if len(srcs) == 0 {
		return nil
	}
	latest := srcs[len(srcs)-1].Version
	if cur < latest {
		return fmt.Errorf("%w: schema %s is at version %d, this binary needs %d; run `%s migrate` first", ErrSchemaBehind, m.Schema, cur, latest, binary)
	}
	if cur > latest {
		log.Warn("database schema is newer than this binary: serving on it (migrations only add; see docs/operations.md#upgrades-and-rollbacks)",
			"schema", m.Schema, "schema_version", cur, "binary_schema_version", latest)
	}
	return nil
}

// Querier is what a pool, a connection and a transaction share, so one query function
// serves inside and outside transactions.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// InTx runs fn in a transaction, committing when it returns nil.
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, fn)
}

// HasNUL reports whether any value holds U+0000. JSON and gRPC may carry it; Postgres
// text cannot store or even compare it (the query fails), so services refuse such input
// as a 400, or treat it as matching nothing, before it reaches SQL.
func HasNUL(values ...string) bool {
	for _, v := range values {
		if strings.IndexByte(v, 0) >= 0 {
			return true
		}
	}
	return false
}

// IsUniqueViolation reports a unique-constraint failure (optionally a named constraint).
func IsUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && (constraint == "" || pgErr.ConstraintName == constraint)
}

// IsForeignKeyViolation reports a foreign-key failure (optionally a named constraint): a
// row that references one that is gone, or a delete of a row still referenced.
func IsForeignKeyViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503" && (constraint == "" || pgErr.ConstraintName == constraint)
}

// IsSerializationFailure reports a lost serialization or deadlock race that is safe to retry.
func IsSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
