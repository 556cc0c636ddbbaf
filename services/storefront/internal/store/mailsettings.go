package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// MailSettings are a tenant's buyer-email settings; "" is the default.
type MailSettings struct {
	SenderName, ReplyTo, ProductName string
}

// MailSettings returns the tenant's settings, all empty when it saved none.
func (s *Store) MailSettings(ctx context.Context, tenant string) (MailSettings, error) {
	var m MailSettings
	err := s.pool.QueryRow(ctx, `SELECT sender_name, reply_to, product_name FROM mail_settings WHERE tenant_id = $1`,
		tenant).Scan(&m.SenderName, &m.ReplyTo, &m.ProductName)
	if errors.Is(err, pgx.ErrNoRows) {
		return MailSettings{}, nil
	}
	return m, err
}

// SaveMailSettings replaces the tenant's settings (one statement: concurrent saves leave
// one of them whole).
func (s *Store) SaveMailSettings(ctx context.Context, tenant string, m MailSettings) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO mail_settings (tenant_id, sender_name, reply_to, product_name)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant_id) DO UPDATE SET sender_name = $2, reply_to = $3, product_name = $4, updated_at = now()`,
		tenant, m.SenderName, m.ReplyTo, m.ProductName)
	return err
}
