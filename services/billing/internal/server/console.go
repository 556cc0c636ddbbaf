package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"golang.org/x/crypto/argon2"
	"google.golang.org/grpc/codes"
)

// errInvalidCredentials is the one sign-in failure: it never says which part was wrong.
var errInvalidCredentials = &apierr.Error{Code: codes.Unauthenticated, Message: "Invalid credentials"}

// Console implements ConsoleAccountsService: console sign-in, sessions and passwords.
type Console struct {
	accountsv1.UnimplementedConsoleAccountsServiceServer
	store *store.Store
	authn *auth.Authenticator
	multi bool
}

// NewConsole returns the console credentials service. authn checks the self-hosted admin key.
func NewConsole(s *store.Store, authn *auth.Authenticator, multiTenant bool) *Console {
	return &Console{store: s, authn: authn, multi: multiTenant}
}

// SignIn exchanges an API key, or a hosted email and password, for a session.
func (c *Console) SignIn(ctx context.Context, req *accountsv1.SignInRequest) (*accountsv1.SignInResponse, error) {
	tenant, opener, err := c.signInTenant(ctx, req)
	if err != nil {
		return nil, err
	}
	token, err := c.store.CreateSession(ctx, tenant, opener)
	if errors.Is(err, apierr.Unauthorized) {
		return nil, errInvalidCredentials
	}
	if err != nil {
		return nil, err
	}
	return &accountsv1.SignInResponse{SessionToken: token, TenantId: tenant}, nil
}

// signInTenant checks the credentials of a sign-in and returns the tenant and the
// credential that the session will live as long as.
func (c *Console) signInTenant(ctx context.Context, req *accountsv1.SignInRequest) (string, store.Opener, error) {
	key := strings.TrimSpace(req.GetApiKey())
	if key != "" {
		if auth.IsSessionToken(key) {
			return "", store.Opener{}, errInvalidCredentials
		}
		if !c.multi {
			if c.authn.IsAdminKey(key) {
				return auth.SelfHostedTenant, store.Opener{Kind: store.OpenedByAdminKey, AdminKeyFingerprint: auth.AdminKeyFingerprint(key)}, nil
			}
			return "", store.Opener{}, errInvalidCredentials
		}
		cred, opener, err := c.store.ResolveOpener(ctx, key)
		if errors.Is(err, auth.ErrTenantSuspended) {
			return "", store.Opener{}, err
		}
		// A session can do whatever the tenant's key can: a read-scope key opens none.
		if err != nil || cred.ReadOnly {
			return "", store.Opener{}, errInvalidCredentials
		}
		return cred.TenantID, opener, nil
	}
	email, password := strings.TrimSpace(req.GetEmail()), req.GetPassword()
	if !c.multi || email == "" || password == "" {
		return "", store.Opener{}, errInvalidCredentials
	}
	candidates, err := c.store.PasswordCandidates(ctx, email)
	if err != nil {
		return "", store.Opener{}, err
	}
	if len(candidates) == 0 {
		// The same work as a real check, so timing does not tell which emails exist.
		_ = checkPassword(dummyHash, password)
		return "", store.Opener{}, errInvalidCredentials
	}
	for _, cand := range candidates {
		if checkPassword(cand.Hash, password) {
			return cand.TenantID, store.Opener{Kind: store.OpenedByPassword}, nil
		}
	}
	return "", store.Opener{}, errInvalidCredentials
}

// SignOut ends the calling session.
func (c *Console) SignOut(ctx context.Context, _ *accountsv1.SignOutRequest) (*accountsv1.SignOutResponse, error) {
	token, _ := auth.Bearer(ctx)
	if !auth.IsSessionToken(token) {
		return nil, apierr.Invalid("Not a console session")
	}
	if err := c.store.DeleteSession(ctx, token); err != nil {
		return nil, err
	}
	return &accountsv1.SignOutResponse{}, nil
}

// GetAccount describes the signed-in tenant.
func (c *Console) GetAccount(ctx context.Context, _ *accountsv1.GetAccountRequest) (*accountsv1.GetAccountResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if !c.multi {
		return &accountsv1.GetAccountResponse{TenantId: tenant, TenantName: "Self-hosted", MultiTenant: false}, nil
	}
	t, hasPassword, err := c.store.GetTenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &accountsv1.GetAccountResponse{TenantId: t.ID, TenantName: t.Name, Email: t.Email, HasPassword: hasPassword, MultiTenant: true}, nil
}

// MinPasswordLength and MaxPasswordLength bound a console password (characters).
const (
	MinPasswordLength = 12
	MaxPasswordLength = 256
)

// SetPassword sets the hosted tenant's console password; every session opened with the
// password it replaces ends, except the caller's.
func (c *Console) SetPassword(ctx context.Context, req *accountsv1.SetPasswordRequest) (*accountsv1.SetPasswordResponse, error) {
	if !c.multi {
		return nil, apierr.Invalid("Passwords are only available for hosted accounts")
	}
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	n := utf8.RuneCountInString(req.GetPassword())
	if !utf8.ValidString(req.GetPassword()) || n < MinPasswordLength {
		return nil, apierr.Invalid("password must be at least %d characters", MinPasswordLength)
	}
	if n > MaxPasswordLength {
		return nil, apierr.Invalid("password must be at most %d characters", MaxPasswordLength)
	}
	caller, _ := auth.Bearer(ctx)
	if err := c.store.SetPasswordHash(ctx, tenant, hashPassword(req.GetPassword()), caller); err != nil {
		return nil, err
	}
	return &accountsv1.SetPasswordResponse{}, nil
}

// argon2id parameters: OWASP's minimum recommendation (19 MiB, 2 passes, 1 lane).
const (
	argonMemory  = 19 * 1024
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
)

var b64 = base64.RawStdEncoding

// hashPassword returns the PHC string of an argon2id hash with a random salt.
func hashPassword(password string) string {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		panic(err)
	}
	sum := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(sum))
}

// checkPassword verifies password against a PHC argon2id string, with its own parameters.
func checkPassword(phc, password string) bool {
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var (
		version int
		m, t    uint32
		p       uint8
	)
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || m > 1<<20 || t == 0 || t > 10 || p == 0 {
		return false
	}
	salt, err1 := b64.DecodeString(parts[4])
	want, err2 := b64.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// dummyHash is checked when no tenant matches an email.
var dummyHash = hashPassword("keyhouse-no-such-account")
