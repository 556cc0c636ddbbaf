package mail

import (
	"context"
	"errors"
	"fmt"
	"net"
	netmail "net/mail"
	"net/url"
	"strconv"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// sendTimeout bounds one SMTP conversation (dial to QUIT).
const sendTimeout = 15 * time.Second

type smtpSender struct {
	host    string
	port    int
	opts    []gomail.Option
	from    string
	replyTo string
}

func newSMTP(cfg Config) (*smtpSender, error) {
	// The URL carries a password: errors describe it without echoing it.
	u, err := url.Parse(cfg.SMTPURL)
	if err != nil || u.Host == "" || (u.Scheme != "smtp" && u.Scheme != "smtps") {
		return nil, errors.New("mail: SMTP_URL must look like smtp://user:pass@host:port or smtps://…")
	}
	if cfg.From == "" {
		return nil, errors.New("mail: EMAIL_FROM is required with EMAIL_PROVIDER=smtp")
	}
	probe := gomail.NewMsg()
	if err := probe.From(cfg.From); err != nil {
		return nil, fmt.Errorf("mail: EMAIL_FROM is not an address: %w", err)
	}
	if cfg.ReplyTo != "" {
		if err := probe.ReplyTo(cfg.ReplyTo); err != nil {
			return nil, fmt.Errorf("mail: EMAIL_REPLY_TO is not an address: %w", err)
		}
	}
	host := u.Hostname()
	port := 587
	if u.Scheme == "smtps" {
		port = 465
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return nil, errors.New("mail: SMTP_URL has an invalid port")
		}
	}
	opts := []gomail.Option{gomail.WithPort(port), gomail.WithTimeout(sendTimeout)}
	if u.Scheme == "smtps" {
		opts = append(opts, gomail.WithSSL())
	} else {
		// STARTTLS when the server offers it; plain SMTP otherwise (a local relay).
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSOpportunistic))
	}
	if user := u.User.Username(); user != "" {
		pass, _ := u.User.Password()
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover),
			gomail.WithUsername(user), gomail.WithPassword(pass))
	}
	return &smtpSender{host: host, port: port, opts: opts, from: cfg.From, replyTo: cfg.ReplyTo}, nil
}

func (s *smtpSender) Provider() string { return ProviderSMTP }

// setFrom writes EMAIL_FROM, or its address under the tenant's display name, quoted and
// RFC 2047-encoded by net/mail (go-mail's FromFormat drops the quotes of a name).
func (s *smtpSender) setFrom(msg *gomail.Msg, name string) error {
	if name == "" {
		return msg.From(s.from)
	}
	a, err := netmail.ParseAddress(s.from)
	if err != nil {
		return err
	}
	return msg.From((&netmail.Address{Name: name, Address: a.Address}).String())
}

func (s *smtpSender) Send(ctx context.Context, m Message) error {
	to, err := ParseRecipient(m.To)
	if err != nil {
		return err
	}
	if err := m.checkSender(); err != nil {
		return err
	}
	msg := gomail.NewMsg()
	if err := s.setFrom(msg, m.SenderName); err != nil {
		return err
	}
	replyTo := s.replyTo
	if m.ReplyTo != "" {
		replyTo = m.ReplyTo
	}
	if replyTo != "" {
		if err := msg.ReplyTo(replyTo); err != nil {
			return err
		}
	}
	// go-mail's errors name the recipient (its parse error quotes the address, its send
	// error lists "affected recipient(s)", and servers quote it in their refusal): only
	// their text goes on, with the address masked (Recipient.maskIn), and none of them
	// is wrapped, so no caller can reach the address (or the message) through errors.As.
	if err := msg.To(to.Address); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidRecipient, to.maskIn(err.Error(), m.To))
	}
	msg.Subject(m.Subject)
	msg.SetDate()
	msg.SetMessageID()
	msg.SetBodyString(gomail.TypeTextPlain, m.Text)

	client, err := gomail.NewClient(s.host, s.opts...)
	if err != nil {
		return fmt.Errorf("mail: smtp client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	server := net.JoinHostPort(s.host, strconv.Itoa(s.port))
	conn, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return fmt.Errorf("mail: smtp send to %s: dial failed: %w", server, err)
	}
	defer func() { _ = client.CloseWithSMTPClient(conn) }()
	// go-mail asks for SMTPUTF8 whenever the server offers it; without it a non-ASCII
	// local part would go out as raw bytes, so that send is refused before MAIL FROM.
	if offered, _ := conn.Extension("SMTPUTF8"); to.UTF8 && !offered {
		return ErrSMTPUTF8Unsupported
	}
	if err := client.SendWithSMTPClient(conn, msg); err != nil {
		return fmt.Errorf("mail: smtp send to %s: send failed: %s", server, to.maskIn(err.Error(), m.To))
	}
	return nil
}
