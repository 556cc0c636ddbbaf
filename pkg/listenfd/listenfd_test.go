package listenfd

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The child half of TestAProcessServesOnTheSocketItInherited: it serves one line on the
// socket named grpc. Its own address is one it could never bind (port 1 as non-root is
// refused; as root it is free but is not where the parent dials), so an answer proves the
// socket was inherited.
func TestMain(m *testing.M) {
	if os.Getenv("LISTENFD_TEST_CHILD") == "1" {
		lis, err := Listen("grpc", "127.0.0.1:1")
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(2)
		}
		conn, err := lis.Accept()
		if err != nil {
			os.Exit(3)
		}
		_, _ = conn.Write([]byte("child " + os.Getenv("LISTEN_FDS") + "\n"))
		conn.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestAProcessServesOnTheSocketItInherited(t *testing.T) {
	metrics, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer metrics.Close()
	grpc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := grpc.Addr().String()
	var files []*os.File
	for _, l := range []net.Listener{metrics, grpc} {
		f, err := l.(*net.TCPListener).File()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LISTENFD_TEST_CHILD=1")
	cmd.Env = append(cmd.Env, Env([]string{"metrics", "grpc"})...)
	cmd.ExtraFiles = files
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	grpc.Close() // only the child's copy is left
	defer func() { _ = cmd.Wait() }()

	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	// The variables are cleared once read, so nothing the process starts takes the sockets.
	if line != "child \n" {
		t.Fatalf("answer %q, want %q", line, "child \n")
	}
}

func TestSocketsPassedToAnotherProcessAreNotTaken(t *testing.T) {
	env := map[string]string{"LISTEN_FDS": "2", "LISTEN_FDNAMES": "grpc:metrics", "LISTEN_PID": strconv.Itoa(os.Getpid() + 1)}
	if got := fromEnv(func(k string) string { return env[k] }, os.Getpid()); got != nil {
		t.Fatalf("took %v, passed to pid %s", got, env["LISTEN_PID"])
	}
}

// A name the launcher did not pass is bound on its address, here one that is taken.
func TestWithoutAnInheritedSocketListenBindsTheAddress(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if lis, err := Listen("http", taken.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		if lis != nil {
			lis.Close()
		}
		t.Fatalf("listen on a taken address: %v, want address in use", err)
	}
}
