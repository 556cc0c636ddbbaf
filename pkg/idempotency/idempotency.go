// Package idempotency is the Idempotency-Key mechanism of every create (addendum §8): the
// first answer to a request is stored, in the same transaction as what it created, for 24
// hours per tenant and key; a retry with the same request gets that answer back and creates
// nothing, the same key with another request is a 409.
//
// A service that offers it copies TableSQL into one of its migrations (like natsx's
// outbox table; a test per service holds the copy to it with pgxx.CheckSharedDDL), wraps
// its create in Do, and deletes expired records with Purge.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/periodic"
	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/signing"
	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// TableSQL is the table Do uses, in the service's own schema. request_hash covers the
// method and the request, so the same key with another request is told apart.
const TableSQL = `CREATE TABLE idempotency_keys (
    tenant_id    text        NOT NULL,
    idem_key     text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
`

// TTL is how long a first answer is replayed.
const TTL = 24 * time.Hour

// Header is the gRPC metadata the gateway fills from the HTTP Idempotency-Key header;
// internal gRPC callers (the storefront) set it themselves.
const Header = "idempotency-key"

// BinaryHeader carries, byte for byte, an Idempotency-Key that gRPC text metadata cannot
// (a byte outside printable ASCII, see Printable): the gateway forwards such a key here
// instead of dropping it, so Key refuses it and the call creates nothing, rather than
// going ahead as a call without a key that a retry would repeat.
const BinaryHeader = "idempotency-key-bin"

// MaxKeyLen bounds the key a client may send.
const MaxKeyLen = 255

// ErrReused is the answer to a key reused with a different request.
var ErrReused = apierr.Conflict("Idempotency-Key reused with a different request")

// Key returns the call's Idempotency-Key, "" when none was sent. The gRPC method must
// declare (keyhouse.api.v1.idempotency_key), the option the OpenAPI document declares the
// header from, so a method cannot honour the key without its documentation saying so.
// TestEveryReaderOfTheKeyIsADeclaredMethod holds every call of Key in the repository to
// that rule in make test; the check at run time stays as the safe answer (an error, and
// nothing created) should a call escape it.
//
// A key is 1 to MaxKeyLen printable ASCII characters (space to ~, what gRPC metadata
// carries as text) once the spaces at its ends are trimmed. A key sent but not so, or sent
// twice, is refused (400) before anything is done: a key that cannot be honoured must not
// let the call go ahead without one.
func Key(ctx context.Context) (string, error) {
	if err := declared(ctx); err != nil {
		return "", err
	}
	sent := append(metadata.ValueFromIncomingContext(ctx, Header), metadata.ValueFromIncomingContext(ctx, BinaryHeader)...)
	switch {
	case len(sent) == 0:
		return "", nil
	case len(sent) > 1:
		return "", apierr.Invalid("Idempotency-Key must be sent once")
	case !Printable(sent[0]):
		return "", apierr.Invalid("Idempotency-Key must be printable ASCII")
	}
	k := strings.TrimSpace(sent[0])
	if k == "" {
		return "", apierr.Invalid("Idempotency-Key must not be blank")
	}
	if len(k) > MaxKeyLen {
		return "", apierr.Invalid("Idempotency-Key must be at most %d characters", MaxKeyLen)
	}
	return k, nil
}

// Printable reports whether every byte of k is printable ASCII (0x20 to 0x7E): what gRPC
// metadata carries as text, and so what the gateway forwards as Header (anything else it
// forwards as BinaryHeader).
func Printable(k string) bool {
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7E {
			return false
		}
	}
	return true
}

// ErrNotHonoured is the answer of a method that writes but cannot honour a key (a batch,
// whose items are the calls of several tenants, each with its own answer): the key is
// refused before anything is done, as one that is not printable is (addendum §8), rather
// than the call going ahead as if none had been sent.
var ErrNotHonoured = apierr.Invalid("Idempotency-Key is not accepted by this method: send each item as its own call with its own key")

// RefuseKey is ErrNotHonoured when the call carries an Idempotency-Key, in either form.
func RefuseKey(ctx context.Context) error {
	if md, _ := metadata.FromIncomingContext(ctx); Sent(md) {
		return ErrNotHonoured
	}
	return nil
}

// Sent reports whether md carries an Idempotency-Key, in either form: such a call must
// reach a method that reads it with Key, not a path that drops metadata (a batch).
func Sent(md metadata.MD) bool {
	return len(md.Get(Header)) > 0 || len(md.Get(BinaryHeader)) > 0
}

// declared refuses a gRPC method that reads the key without declaring that it does. A
// call outside gRPC (a unit test calling the handler) has no method to check.
func declared(ctx context.Context) error {
	full, ok := grpc.Method(ctx)
	if !ok {
		return nil
	}
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(full, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return fmt.Errorf("idempotency: method %s: %w", full, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok || !proto.GetExtension(md.Options(), apiv1.E_IdempotencyKey).(bool) {
		return fmt.Errorf("idempotency: %s reads the Idempotency-Key but does not declare (keyhouse.api.v1.idempotency_key)", full)
	}
	return nil
}

// RequestHash identifies a request: the method and the request's deterministic wire form
// (maps sorted), so the same JSON body with its keys in another order matches.
func RequestHash(method string, req proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		panic(err)
	}
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write(b)
	return h.Sum(nil)
}

func ttlInterval() string { return fmt.Sprintf("%d seconds", int(TTL.Seconds())) }

// Do runs create in a transaction guarded by (tenant, key): the first call stores create's
// answer in that same transaction; a later call with the same requestHash within TTL gets
// the stored answer (replayed true) without running create; another hash is ErrReused. A
// concurrent call with the same key waits on the first one's row and then replays its
// answer. When create fails nothing is kept, so a retry runs create again. key "" runs
// create in a plain transaction.
func Do(ctx context.Context, db Beginner, tenant, key string, requestHash []byte,
	create func(pgx.Tx) ([]byte, error)) (resp []byte, replayed bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if key == "" {
			resp, err = create(tx)
			return err
		}
		// A live record wins the conflict (no row returned); an expired one is taken over.
		var mine bool
		err := tx.QueryRow(ctx, `INSERT INTO idempotency_keys (tenant_id, idem_key, request_hash)
			VALUES ($1, $2, $3)
			ON CONFLICT (tenant_id, idem_key) DO UPDATE
				SET request_hash = EXCLUDED.request_hash, response = NULL, created_at = now()
				WHERE idempotency_keys.created_at < now() - $4::interval
			RETURNING true`, tenant, key, requestHash, ttlInterval()).Scan(&mine)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if mine {
			if resp, err = create(tx); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE idempotency_keys SET response = $3 WHERE tenant_id = $1 AND idem_key = $2`,
				tenant, key, resp)
			return err
		}
		var hash []byte
		if err := tx.QueryRow(ctx, `SELECT request_hash, response FROM idempotency_keys
			WHERE tenant_id = $1 AND idem_key = $2`, tenant, key).Scan(&hash, &resp); err != nil {
			return err
		}
		if !bytes.Equal(hash, requestHash) {
			return ErrReused
		}
		replayed = true
		return nil
	})
	return resp, replayed, err
}

// Keys gives the installation keyring DoSealed seals with: licensingclient.Client in a
// service, a fixed keyring in tests.
type Keys interface {
	Keyring(ctx context.Context) (*signing.Keyring, error)
}

// keyRefresher is a Keys that can fetch the keyring again (licensingclient.Client): a
// stored answer sealed under a keyring newer than the one kept opens with the new one.
type keyRefresher interface {
	RefreshKeyring(ctx context.Context) (*signing.Keyring, error)
}

// ErrAnswerSealed is a replay whose stored answer no longer opens: the installation
// keyring was replaced since the first call. The key cannot be honoured, and running the
// create again would break its promise, so the retry is refused and creates nothing.
var ErrAnswerSealed = apierr.Conflict("Idempotency-Key's first answer can no longer be shown: send the request with a new key")

// DoSealed is Do for a create whose answer shows a secret once (an API key, a webhook
// endpoint's signing secret): the answer is stored sealed under the installation keyring
// (pkg/seal, PurposeIdempotentAnswer), so the table holds no secret in the clear, and a
// replay opens it back to the first answer byte for byte. The keyring is asked for only
// when a key was sent, and before the transaction begins, so no transaction waits on it.
func DoSealed(ctx context.Context, db Beginner, keys Keys, tenant, key string, requestHash []byte,
	create func(pgx.Tx) ([]byte, error)) (resp []byte, replayed bool, err error) {
	if key == "" {
		return Do(ctx, db, tenant, key, requestHash, create)
	}
	ring, err := keys.Keyring(ctx)
	if err != nil {
		return nil, false, err
	}
	var answer []byte
	stored, replayed, err := Do(ctx, db, tenant, key, requestHash, func(tx pgx.Tx) ([]byte, error) {
		var err error
		if answer, err = create(tx); err != nil {
			return nil, err
		}
		return seal.Seal(ring, seal.PurposeIdempotentAnswer, answer)
	})
	if err != nil || !replayed {
		return answer, replayed, err
	}
	if answer, err = seal.Open(ring, seal.PurposeIdempotentAnswer, stored); err == nil {
		return answer, true, nil
	}
	if r, ok := keys.(keyRefresher); ok {
		if ring, err = r.RefreshKeyring(ctx); err != nil {
			return nil, false, err
		}
		if answer, err = seal.Open(ring, seal.PurposeIdempotentAnswer, stored); err == nil {
			return answer, true, nil
		}
	}
	return nil, false, ErrAnswerSealed
}

// Beginner starts Do's transaction: a pool, or one connection of it (a caller that needs
// to know which backend ran the transaction).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Purge deletes records past TTL.
func Purge(ctx context.Context, db *pgxpool.Pool) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < now() - $1::interval`, ttlInterval())
	return tag.RowsAffected(), err
}

// PurgeEvery runs Purge every interval until ctx is done, logging through report.
func PurgeEvery(ctx context.Context, db *pgxpool.Pool, interval time.Duration, report func(deleted int64, err error)) {
	periodic.Run(ctx, interval, func(ctx context.Context) { report(Purge(ctx, db)) })
}

// PurgeHourly is the cleanup every service that offers the mechanism runs: PurgeEvery
// each hour, logging what it deleted and why it could not.
func PurgeHourly(ctx context.Context, db *pgxpool.Pool, log *slog.Logger) {
	PurgeEvery(ctx, db, time.Hour, func(n int64, err error) {
		if err != nil {
			log.Warn("idempotency cleanup failed", "error", err.Error())
		} else if n > 0 {
			log.Info("idempotency records expired", "deleted", n)
		}
	})
}
