package bench

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// A test binary started as a refusal floor (startRefusalFloor runs this binary again)
// serves it instead of running the tests.
func TestMain(m *testing.M) {
	if RefusalFloorChild() {
		return
	}
	os.Exit(m.Run())
}

// Each floor refuses every request with the gateway's exact refusal, which the overload
// report's generator counts as a refusal and not an error, and keeps its connection for
// the next request: requests of different sizes, one after another on each connection.
func TestEachRefusalFloorAnswersTheGatewaysRefusalOnAKeptConnection(t *testing.T) {
	for _, k := range refusalFloorKinds {
		t.Run(k.kind, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() { _ = serveRefusalFloor(k.kind, l) }()
			v := newVerifier("http://"+l.Addr().String(), 1)
			v.madeUpCredentials = true // a longer head, a header more
			for i := range 20 {
				key := "KEY-" + strconv.Itoa(i*i*i) // bodies of several lengths
				if o := v.verify(context.Background(), key, 0, i, time.Now()); !o.refused || o.err != "" {
					t.Fatalf("request %d: %+v", i, o)
				}
			}
			// All 20 went over one connection: the floor kept it open after each answer.
			if open := maxConns - len(v.slots); open != 1 {
				t.Fatalf("%d connections opened for 20 requests in a row, want 1", open)
			}
			// A body is read to its Content-Length, blank lines in it included: one answer a
			// request, however the body looks.
			c, err := v.conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for i, body := range []string{"\r\n\r\n", "{\"key\":\"K\"}\r\n\r\nGET / HTTP/1.1\r\n\r\n", ""} {
				req := "POST /v1/verify-license HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
				if o, keep := v.roundTrip(c, req); !o.refused || !keep {
					t.Fatalf("body %d: %+v, kept %v", i, o, keep)
				}
			}
			_ = c.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if n, _ := c.r.Read(make([]byte, 1)); n != 0 {
				t.Fatal("an answer more than the requests")
			}
			_ = c.c.Close()
			v.close()
		})
	}
}

// The report's floors are processes of their own: this binary started again, which
// listens, refuses, and exits once the report lets go of it.
func TestARefusalFloorProcessRefusesAndEndsWithItsReport(t *testing.T) {
	f, err := startRefusalFloor(refusalFloorKinds[len(refusalFloorKinds)-1])
	if err != nil {
		t.Fatal(err)
	}
	v := newVerifier(f.url, 1)
	if o := v.verify(context.Background(), "KEY-1", 0, 0, time.Now()); !o.refused {
		t.Fatalf("%+v", o)
	}
	if _, _, ok := procCPU(f.cmd.Process.Pid); !ok {
		t.Fatal("the floor's CPU cannot be read")
	}
	v.close()
	f.stop()
	if !f.cmd.ProcessState.Exited() || f.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("the floor ended with %v, want exit status 0 once its input closed", f.cmd.ProcessState)
	}
}
