package devnats

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A fixed port another process holds (a second `make run`) fails the start at once with
// the port and who holds it; it used to fail after ten seconds with "nats: not ready".
func TestStartOnATakenPortNamesThePortAndItsHolder(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	port := lis.Addr().(*net.TCPAddr).Port
	srv, err := Start(filepath.Join(t.TempDir(), "nats"), port)
	if err == nil {
		srv.Stop()
		t.Fatalf("started on port %d, which this test holds", port)
	}
	want := fmt.Sprintf("nats: port %d is already in use by ", port)
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("(pid %d)", os.Getpid())) {
		t.Errorf("error %q, want %q naming this process (pid %d)", err, want+"…", os.Getpid())
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %q is not EADDRINUSE", err)
	}
}
