// Command keyhouse-dev is `make run`: the whole stack in the foreground, data kept under
// .keyhouse/ so a second run finds the first run's licenses. A process that crashes is
// started again; Ctrl-C stops everything.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/keyhouse/keyhouse/stack"
)

// make run's fixed ports (the gateway's is PORT): those the binaries assume by default
// (pkg/config), so that a process run by hand beside the stack finds the others.
const (
	postgresPort     = 55432
	redisPort        = 56379
	natsPort         = 54222
	firstServicePort = 9101
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "keyhouse-dev: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	root, err := stack.RepoRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, ".keyhouse")
	adminKey, err := adminKey(dir)
	if err != nil {
		return err
	}
	port := 8080
	if v := os.Getenv("PORT"); v != "" {
		if port, err = strconv.Atoi(v); err != nil {
			return errors.New("PORT must be a number")
		}
	}
	// METRICS_PORT names the gateway's metrics port; each service keeps its own port +
	// 1000 (docs/operations.md).
	var gatewayEnv map[string]string
	if v := os.Getenv("METRICS_PORT"); v != "" {
		if _, err := strconv.Atoi(v); err != nil {
			return errors.New("METRICS_PORT must be a number")
		}
		gatewayEnv = map[string]string{"METRICS_PORT": v}
	}
	env := stack.DevEnv(map[string]string{"ADMIN_API_KEY": adminKey})
	for _, name := range []string{"DATABASE_URL", "REDIS_URL", "NATS_URL"} {
		if v := os.Getenv(name); v != "" {
			env[name] = v
		}
	}
	if os.Getenv("PUBLIC_BASE_URL") == "" {
		env["PUBLIC_BASE_URL"] = "http://localhost:" + strconv.Itoa(port)
	}
	fmt.Println("Starting Keyhouse (data in .keyhouse/) ...")
	s, err := stack.Start(ctx, stack.Options{
		Dir:              dir,
		BinDir:           filepath.Join(dir, "bin"),
		Env:              env,
		PostgresPort:     postgresPort,
		RedisPort:        redisPort,
		NATSPort:         natsPort,
		FirstServicePort: firstServicePort,
		GatewayPort:      port,
		Output:           os.Stdout,
		GatewayEnv:       gatewayEnv,
		// make run's data is kept from run to run, so it must survive a crash of the
		// machine; the tests' and benchmarks' throwaway clusters run without.
		DurablePostgres: true,
	})
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w\nmake run listens on fixed ports: Postgres %d, Redis %d, NATS %d, the services %d-%d "+
			"(metrics %d-%d), the gateway %d (PORT; metrics on METRICS_PORT, default %d). Is another make run "+
			"running? (docs/operations.md#on-one-machine-make-run)", err, postgresPort, redisPort, natsPort,
			firstServicePort, firstServicePort+len(stack.Services)-1, firstServicePort+1000,
			firstServicePort+len(stack.Services)-1+1000, port, port+1000)
	}
	if err != nil {
		return err
	}
	defer s.Stop()
	mode := "self-hosted"
	if strings.EqualFold(os.Getenv("MULTI_TENANT"), "true") {
		mode = "hosted (MULTI_TENANT=true)"
	}
	fmt.Printf("\nKeyhouse is running (%s).\n  URL:       http://localhost:%d\n  Admin key: %s\n  Try:       curl http://localhost:%d/\nPress Ctrl-C to stop.\n\n", mode, port, adminKey, port)
	// A crashed service, gateway, Postgres or Redis is started again (with backoff), and
	// the stack says so, until Ctrl-C.
	s.Supervise(ctx, func(line string) { fmt.Printf("%-12s| %s\n", "keyhouse-dev", line) })
	fmt.Println("\nStopping Keyhouse ...")
	return nil
}

// adminKey returns ADMIN_API_KEY when set, else the key generated on the first run.
func adminKey(dir string) (string, error) {
	if v := os.Getenv("ADMIN_API_KEY"); v != "" {
		return v, nil
	}
	file := filepath.Join(dir, "admin-key")
	if b, err := os.ReadFile(file); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	key := "kh_admin_" + rand.Text() + rand.Text()
	return key, os.WriteFile(file, []byte(key+"\n"), 0o600)
}
