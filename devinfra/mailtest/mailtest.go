// Package mailtest is a real SMTP server for tests (github.com/emersion/go-smtp, in
// process, on loopback): it accepts mail like any relay and keeps what it received, so a
// test reads the messages a user would get. It can be taken down and brought back on the
// same port, it can hold a conversation open before accepting, to stop a sender between
// "connected" and "delivered", and it can refuse recipients as a relay refuses an address
// it does not know.
package mailtest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Received is one accepted message.
type Received struct {
	// User is the SMTP AUTH user, "" without authentication.
	User    string
	From    string
	To      []string
	Subject string
	// Body is the decoded text body (quoted-printable and base64 undone).
	Body string
	// Header is the message's header as transmitted; HeaderText decodes one.
	Header mail.Header
	// Raw is the message as transmitted.
	Raw []byte
	// SMTPUTF8 says the sender asked for SMTPUTF8 (RFC 6531) in MAIL FROM.
	SMTPUTF8 bool
}

// Server is a running (or stopped) SMTP sink.
type Server struct {
	// Addr is host:port; it stays the same across Stop and Start.
	Addr string

	mu       sync.Mutex
	srv      *smtp.Server
	lis      net.Listener
	received []Received
	hold     chan struct{} // non-nil: DATA waits until it is closed
	arrived  chan struct{} // signalled when a DATA starts waiting on hold
	// smtpUTF8 makes the server offer SMTPUTF8 (RFC 6531), as most public relays do; a
	// server started by Start offers it not, as some relays still do.
	smtpUTF8 bool
	// refuse, when set, refuses a RCPT TO with 550 5.1.1 and the text it returns, if any.
	refuse func(rcpt string) string
}

// Start listens on a free loopback port. The server does not offer SMTPUTF8.
func Start() (*Server, error) { return start(false) }

// StartSMTPUTF8 is Start with SMTPUTF8 (RFC 6531) offered: an address with a non-ASCII
// local part can be delivered.
func StartSMTPUTF8() (*Server, error) { return start(true) }

// New starts a server for the test t (as Start), fails t when it cannot, and stops it when
// t ends (t.Cleanup). A test may stop it sooner, for a closed port or an outage: Stop does
// nothing the second time.
func New(t testing.TB) *Server { t.Helper(); return forTest(t, false) }

// NewSMTPUTF8 is New with SMTPUTF8 (RFC 6531) offered, as StartSMTPUTF8.
func NewSMTPUTF8(t testing.TB) *Server { t.Helper(); return forTest(t, true) }

func forTest(t testing.TB, smtpUTF8 bool) *Server {
	t.Helper()
	s, err := start(smtpUTF8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func start(smtpUTF8 bool) (*Server, error) {
	s := &Server{arrived: make(chan struct{}, 64), smtpUTF8: smtpUTF8}
	if err := s.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) listen(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := smtp.NewServer(backend{s})
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	srv.EnableSMTPUTF8 = s.smtpUTF8
	srv.ReadTimeout = 30 * time.Second
	srv.WriteTimeout = 30 * time.Second
	s.mu.Lock()
	s.srv = srv
	s.lis = lis
	s.Addr = lis.Addr().String()
	s.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// URL is the SMTP_URL that reaches this server.
func (s *Server) URL() string { return "smtp://" + s.Addr }

// Stop closes the listener and every open conversation: senders get "connection refused".
func (s *Server) Stop() {
	s.mu.Lock()
	srv, lis := s.srv, s.lis
	s.srv, s.lis = nil, nil
	s.mu.Unlock()
	if lis != nil {
		// Closed here too: Close alone misses a listener Serve has not picked up yet.
		_ = lis.Close()
	}
	if srv != nil {
		_ = srv.Close()
	}
}

// Restart listens again on the same address.
func (s *Server) Restart() error {
	var err error
	for range 50 { // the old socket may linger for a moment
		if err = s.listen(s.Addr); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Hold makes every conversation wait at MAIL FROM, before any of the message is sent,
// until Release: a sender killed meanwhile has delivered nothing.
func (s *Server) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil {
		s.hold = make(chan struct{})
	}
}

// Release lets held and later messages through.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
}

// Held waits until a sender is held, or timeout.
func (s *Server) Held(timeout time.Duration) bool {
	select {
	case <-s.arrived:
		return true
	case <-time.After(timeout):
		return false
	}
}

// RefuseRecipients makes RCPT TO answer 550 5.1.1 with the text reply returns for the
// address as the server received it, the way a relay refuses an address it does not know
// (many quote it: see Rejected); a recipient for which reply returns "" is accepted, and
// nil accepts every recipient again.
func (s *Server) RefuseRecipients(reply func(rcpt string) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = reply
}

// Rejected is Postfix's text for an unknown recipient, which quotes the address:
// "<jane@example.com>: Recipient address rejected: User unknown in local recipient table".
func Rejected(rcpt string) string {
	return "<" + rcpt + ">: Recipient address rejected: User unknown in local recipient table"
}

// Messages returns what was accepted so far.
func (s *Server) Messages() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// To returns the accepted messages addressed to rcpt.
func (s *Server) To(rcpt string) []Received {
	var out []Received
	for _, m := range s.Messages() {
		for _, r := range m.To {
			if strings.EqualFold(r, rcpt) {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

type backend struct{ s *Server }

func (b backend) NewSession(*smtp.Conn) (smtp.Session, error) { return &session{s: b.s}, nil }

type session struct {
	s        *Server
	user     string
	from     string
	smtpUTF8 bool
	to       []string
}

// AuthMechanisms offers PLAIN; any credentials are accepted and the user is kept.
func (x *session) AuthMechanisms() []string { return []string{sasl.Plain} }

// Auth implements smtp.AuthSession.
func (x *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, username, _ string) error {
		x.user = username
		return nil
	}), nil
}

func (x *session) Mail(from string, opts *smtp.MailOptions) error {
	x.s.mu.Lock()
	hold := x.s.hold
	x.s.mu.Unlock()
	if hold != nil {
		select {
		case x.s.arrived <- struct{}{}:
		default:
		}
		<-hold
	}
	x.from = from
	x.smtpUTF8 = opts != nil && opts.UTF8
	return nil
}

func (x *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	x.s.mu.Lock()
	refuse := x.s.refuse
	x.s.mu.Unlock()
	if refuse != nil {
		if text := refuse(to); text != "" {
			return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: text}
		}
	}
	x.to = append(x.to, to)
	return nil
}

func (x *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	rec, err := parse(x.from, x.to, raw)
	rec.User = x.user
	rec.SMTPUTF8 = x.smtpUTF8
	if err != nil {
		return &smtp.SMTPError{Code: 554, Message: err.Error()}
	}
	x.s.mu.Lock()
	x.s.received = append(x.s.received, rec)
	x.s.mu.Unlock()
	return nil
}

func (x *session) Reset()        { x.from, x.to, x.smtpUTF8 = "", nil, false }
func (x *session) Logout() error { return nil }

func parse(from string, to []string, raw []byte) (Received, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return Received{}, fmt.Errorf("unparsable message: %w", err)
	}
	dec := new(mimeDecoder)
	subject, err := dec.header(msg.Header.Get("Subject"))
	if err != nil {
		return Received{}, err
	}
	body, err := decodeBody(msg.Header.Get("Content-Transfer-Encoding"), msg.Body)
	if err != nil {
		return Received{}, err
	}
	return Received{From: from, To: append([]string(nil), to...), Subject: subject, Body: body, Header: msg.Header, Raw: raw}, nil
}

// HeaderText is a header's value as a mail client shows it (RFC 2047 words decoded),
// e.g. `"Acme Support" <shop@example.com>` for From; "" when the header is absent.
func (r Received) HeaderText(name string) string {
	v := r.Header.Get(name)
	if d, err := new(mimeDecoder).header(v); err == nil {
		return d
	}
	return v
}
