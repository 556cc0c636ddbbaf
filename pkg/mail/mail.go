// Package mail sends the service's email (the storefront's buyer emails) through the
// provider EMAIL_PROVIDER names: "smtp" delivers through SMTP_URL with
// github.com/wneessen/go-mail, "log" only writes the message to the log (self-hosted
// deployments without mail configuration, api.md Events rule 3).
//
// A Sender never stores the recipient: the address is used for the one send and, in the
// log provider, written masked.
package mail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/metrics"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Providers, as EMAIL_PROVIDER spells them.
const (
	ProviderLog  = "log"
	ProviderSMTP = "smtp"
)

// Message is one plain-text email to one recipient.
type Message struct {
	To      string
	Subject string
	Text    string
	// SenderName is the From display name the recipient sees ("Acme Support"), with the
	// address of EMAIL_FROM; "" sends From as EMAIL_FROM says. ReplyTo, when set, replaces
	// EMAIL_REPLY_TO. Both come from a tenant's settings: Send refuses a name
	// ValidDisplayName refuses and a reply-to ValidAddress refuses, so neither can carry a
	// header of its own.
	SenderName string
	ReplyTo    string
	// Secrets are the credentials Text carries (a license key, a portal link): sent as
	// they are, but never written to a log.
	Secrets []string
}

// redacted is Text with every secret replaced.
func (m Message) redacted() string {
	text := m.Text
	for _, s := range m.Secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, "[redacted]")
		}
	}
	return text
}

// Sender delivers messages.
type Sender interface {
	// Send delivers m or returns why not. Errors name no credential, and the recipient
	// only masked (Mask): a caller may log them and show them to whoever runs the mail
	// server. Only a *ServerError names the server (its address, its reply): its Summary
	// says what failed without it, for anyone else.
	Send(ctx context.Context, m Message) error
	// Provider is "log" or "smtp": the log provider logs instead of delivering.
	Provider() string
}

// Config is the mail part of the service configuration.
type Config struct {
	Provider string
	// SMTPURL is smtp://user:pass@host:port (STARTTLS when offered) or smtps://… (TLS
	// from the first byte); user and password are optional.
	SMTPURL string
	From    string
	ReplyTo string
}

// DefaultFrom is the sender of logged mail when EMAIL_FROM is not set.
const DefaultFrom = "Keyhouse <no-reply@localhost>"

// New returns the Sender cfg.Provider names. Every send it makes is counted in
// keyhouse_mail_sends_total by result (sent, logged, failed).
func New(cfg Config, log *slog.Logger) (Sender, error) {
	s, err := newSender(cfg, log)
	if err != nil {
		return nil, err
	}
	metrics.InitMail()
	return counted{s}, nil
}

// counted records each send's result in the metrics.
type counted struct{ Sender }

func (c counted) Send(ctx context.Context, m Message) error {
	// The send's span names the provider, never the recipient or the message.
	ctx, span := telemetry.StartRoot(ctx, "mail send", trace.SpanKindClient, nil, attribute.String("keyhouse.mail.provider", c.Provider()))
	defer span.End()
	err := c.Sender.Send(ctx, m)
	switch {
	case err != nil:
		span.SetStatus(codes.Error, "send failed") // the error may hold the address
		metrics.RecordMailSend(metrics.MailFailed)
	case c.Provider() == ProviderLog:
		metrics.RecordMailSend(metrics.MailLogged)
	default:
		metrics.RecordMailSend(metrics.MailSent)
	}
	return err
}

func newSender(cfg Config, log *slog.Logger) (Sender, error) {
	if log == nil {
		log = slog.Default()
	}
	switch cfg.Provider {
	case "", ProviderLog:
		from := cfg.From
		if from == "" {
			from = DefaultFrom
		}
		return &logSender{log: log.With("component", "mail"), from: from}, nil
	case ProviderSMTP:
		return newSMTP(cfg)
	default:
		return nil, fmt.Errorf("mail: unknown provider %q (want log or smtp)", cfg.Provider)
	}
}

// MaxAddressLen is the longest address SMTP carries (RFC 5321: a 256-octet path, brackets
// included).
const MaxAddressLen = 254

// ValidAddress reports whether s is one plain email address (no display name, no list) of
// at most MaxAddressLen bytes: what a checkout's customer email must be before it becomes
// a recipient.
func ValidAddress(s string) bool {
	if len(s) > MaxAddressLen {
		return false
	}
	a, err := mail.ParseAddress(s)
	return err == nil && a.Name == "" && a.Address == s && !strings.ContainsAny(s, "\r\n")
}

// ErrInvalidRecipient is returned for a recipient ParseRecipient refuses (wrapped with why).
var ErrInvalidRecipient = errors.New("mail: invalid recipient address")

// ErrInvalidSender is returned for a SenderName or ReplyTo that could not be sent safely.
var ErrInvalidSender = errors.New("mail: invalid sender name or reply-to address")

// MaxDisplayNameLen is the longest sender or product display name, in characters.
const MaxDisplayNameLen = 100

// ValidDisplayName reports whether s may be shown in a header or a subject: 1 to
// MaxDisplayNameLen characters of valid UTF-8, none of them a control character (so no
// CR or LF: a name cannot start a header of its own), not blank.
func ValidDisplayName(s string) bool {
	if strings.TrimSpace(s) == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > MaxDisplayNameLen {
		return false
	}
	return strings.IndexFunc(s, unicode.IsControl) < 0
}

// checkSender refuses a message whose sender fields could not be sent safely.
func (m Message) checkSender() error {
	if m.SenderName != "" && !ValidDisplayName(m.SenderName) || m.ReplyTo != "" && !ValidAddress(m.ReplyTo) {
		return ErrInvalidSender
	}
	return nil
}

type logSender struct {
	log  *slog.Logger
	from string
}

func (l *logSender) Provider() string { return ProviderLog }

func (l *logSender) Send(_ context.Context, m Message) error {
	to, err := ParseRecipient(m.To)
	if err != nil {
		return err
	}
	if err := m.checkSender(); err != nil {
		return err
	}
	from := l.from
	if m.SenderName != "" {
		if a, err := mail.ParseAddress(l.from); err == nil {
			from = (&mail.Address{Name: m.SenderName, Address: a.Address}).String()
		}
	}
	attrs := []any{"from", from, "to", Mask(to.Address), "subject", m.Subject, "body", m.redacted()}
	if m.ReplyTo != "" {
		attrs = append(attrs, "reply_to", Mask(m.ReplyTo))
	}
	l.log.Info("email (EMAIL_PROVIDER=log, not sent)", attrs...)
	return nil
}

// Mask keeps an address recognizable to its owner without writing it down:
// "jane.doe@example.com" → "j***@example.com"; `"jane doe"@example.com` likewise.
func Mask(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return "***"
	}
	local := strings.TrimLeft(addr[:at], `\"`) // a quoted local part's quote, escaped or not
	if local == "" {
		return "***"
	}
	return maskLocal(local) + "@" + addr[at+1:]
}

// maskLocal masks a local part as Mask does, for a server's reply that writes it back
// without the domain: "jane.doe" → "j***".
func maskLocal(local string) string {
	r, _ := utf8.DecodeRuneInString(strings.TrimLeft(local, `\"`))
	if r == utf8.RuneError {
		return "***"
	}
	return string(r) + "***"
}
