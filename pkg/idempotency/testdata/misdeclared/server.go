// Package misdeclared is a fixture of TestEveryReaderOfTheKeyIsADeclaredMethod: a
// handler that reads the Idempotency-Key without its method declaring
// (keyhouse.api.v1.idempotency_key), through a helper, and one that declares it.
package misdeclared

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/idempotency"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
)

type Server struct {
	licensingv1.UnimplementedLicensingServiceServer
}

// IssueLicense declares the option: reading the key is fine.
func (s *Server) IssueLicense(ctx context.Context, req *licensingv1.IssueLicenseRequest) (*licensingv1.IssueLicenseResponse, error) {
	if _, err := idempotency.Key(ctx); err != nil {
		return nil, err
	}
	return &licensingv1.IssueLicenseResponse{}, nil
}

// VerifyLicense does not declare it, and reads it through a helper.
func (s *Server) VerifyLicense(ctx context.Context, req *licensingv1.VerifyLicenseRequest) (*licensingv1.VerifyLicenseResponse, error) {
	if err := s.remember(ctx); err != nil {
		return nil, err
	}
	return &licensingv1.VerifyLicenseResponse{}, nil
}

func (s *Server) remember(ctx context.Context) error {
	_, err := readKey(ctx)
	return err
}

func readKey(ctx context.Context) (string, error) { return idempotency.Key(ctx) }

// orphan reads the key but no handler reaches it: which method it serves cannot be told.
func orphan(ctx context.Context) { _, _ = idempotency.Key(ctx) }
