package mail

import (
	"context"
	"errors"
	"fmt"
	"net"
	netmail "net/mail"
	"net/url"
	"strconv"
	"strings"
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

	server := net.JoinHostPort(s.host, strconv.Itoa(s.port))
	client, err := gomail.NewClient(s.host, s.opts...)
	if err != nil {
		return &ServerError{step: stepConnect, detail: fmt.Sprintf("mail: smtp client for %s: %v", server, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	conn, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return &ServerError{step: stepConnect, detail: fmt.Sprintf("mail: smtp send to %s: dial failed: %v", server, err)}
	}
	defer func() { _ = client.CloseWithSMTPClient(conn) }()
	// go-mail asks for SMTPUTF8 whenever the server offers it; without it a non-ASCII
	// local part would go out as raw bytes, so that send is refused before MAIL FROM.
	if offered, _ := conn.Extension("SMTPUTF8"); to.UTF8 && !offered {
		return ErrSMTPUTF8Unsupported
	}
	if err := client.SendWithSMTPClient(conn, msg); err != nil {
		refused := &ServerError{step: stepMessage,
			detail: fmt.Sprintf("mail: smtp send to %s: send failed: %s", server, to.maskIn(err.Error(), m.To))}
		var sendErr *gomail.SendError
		if errors.As(err, &sendErr) {
			if sendErr.Reason == gomail.ErrSMTPRcptTo {
				refused.step = stepRecipient
			}
			if code := sendErr.ErrorCode(); code != 0 {
				refused.Reply = strings.TrimSpace(strconv.Itoa(code) + " " + sendErr.EnhancedStatusCode())
			}
		}
		return refused
	}
	return nil
}

// ServerError is a send the mail server did not complete: the connection to it failed
// (dial, TLS, authentication), or it refused the recipient or the message. Error is the
// operator's detail: the server's address and its reply, the recipient masked. Summary
// says what failed without naming the server or quoting its reply (whose text may name
// hosts of its own: a relay's next hop, its banner), for whoever uses the installation
// without running its mail server: a hosted installation's tenant.
type ServerError struct {
	step   sendStep
	detail string
	// Reply is the server's status code and, when it sends one, its enhanced status code
	// (RFC 3463): "550 5.1.1"; "" when the server sent no refusal (the connection failed).
	Reply string
}

// sendStep is the step of the SMTP conversation that failed.
type sendStep int

const (
	stepConnect   sendStep = iota // dial, greeting, STARTTLS, AUTH
	stepRecipient                 // RCPT TO: the server refused the recipient
	stepMessage                   // MAIL FROM, DATA or what follows
)

func (e *ServerError) Error() string { return e.detail }

// Summary is what failed, in words a delivery's error can show a tenant: "the connection
// to the mail server failed", "the mail server refused the recipient's address (550
// 5.1.1)", "the mail server refused the email (554 5.7.1)".
func (e *ServerError) Summary() string {
	var what string
	switch e.step {
	case stepConnect:
		return "the connection to the mail server failed"
	case stepRecipient:
		what = "the mail server refused the recipient's address"
	default:
		what = "the mail server refused the email"
	}
	if e.Reply == "" {
		return what
	}
	return what + " (" + e.Reply + ")"
}
