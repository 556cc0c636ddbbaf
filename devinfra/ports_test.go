package devinfra_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// takenFirst hands out port, then free ones: the port another process took between
// FreePort's answer and the server's bind.
func takenFirst(port int) func() (int, error) {
	var handed atomic.Bool
	return func() (int, error) {
		if handed.CompareAndSwap(false, true) {
			return port, nil
		}
		return devinfra.FreePort()
	}
}

// silentPort is a port held by something that accepts connections and never answers.
func silentPort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	return lis.Addr().(*net.TCPAddr).Port
}

// A cluster whose chosen port was taken before it could bind it starts on another, and
// never takes the server that holds the port (another cluster, or anything else) for
// itself.
func TestPostgresWhosePortWasTakenStartsOnAnother(t *testing.T) {
	root := testkit.Dir(t)
	ctx := context.Background()
	other, err := devinfra.StartPostgres(ctx, filepath.Join(root, "pg-other"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Stop() })
	for name, port := range map[string]int{"pg-after-a-cluster": other.Port, "pg-after-a-silent-server": silentPort(t)} {
		t.Run(name, func(t *testing.T) {
			defer devinfra.SetFreePort(takenFirst(port))()
			p, err := devinfra.StartPostgres(ctx, filepath.Join(root, name), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Stop() }()
			if p.Port == port {
				t.Fatalf("started on the taken port %d", port)
			}
			conn, err := pgx.Connect(ctx, p.URL("keyhouse"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var data string
			if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&data); err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, name, "data"); data != want {
				t.Fatalf("port %d is the cluster in %s, want %s", p.Port, data, want)
			}
		})
	}
}

// The same for Redis.
func TestRedisWhosePortWasTakenStartsOnAnother(t *testing.T) {
	testkit.RequireTool(t, "redis-server")
	root := testkit.Dir(t)
	ctx := context.Background()
	other, err := devinfra.StartRedis(ctx, filepath.Join(root, "redis-other"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Stop() })
	for name, port := range map[string]int{"redis-after-a-redis": other.Port, "redis-after-a-silent-server": silentPort(t)} {
		t.Run(name, func(t *testing.T) {
			defer devinfra.SetFreePort(takenFirst(port))()
			r, err := devinfra.StartRedis(ctx, filepath.Join(root, name), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.Stop() }()
			if r.Port == port {
				t.Fatalf("started on the taken port %d", port)
			}
			// The server on its port is the one started in its own folder.
			conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte("CONFIG GET dir\r\n")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 512)
			n, _ := conn.Read(buf)
			if want := filepath.Join(root, name); !strings.Contains(string(buf[:n]), want) {
				t.Fatalf("port %d answers %q, want the redis of %s", r.Port, buf[:n], want)
			}
		})
	}
}

// The same for stripe-mock.
func TestStripeMockWhosePortWasTakenStartsOnAnother(t *testing.T) {
	root := testkit.Dir(t)
	port := silentPort(t)
	defer devinfra.SetFreePort(takenFirst(port))()
	m, err := devinfra.StartStripeMock(context.Background(), filepath.Join(root, "stripe-mock"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if m.Port == port {
		t.Fatalf("started on the taken port %d", port)
	}
}
