// Package listenfd opens a process's listening sockets, taking them from its launcher when
// the launcher bound them already (systemd's socket-activation protocol: LISTEN_FDS,
// LISTEN_FDNAMES, LISTEN_PID), and binding them itself otherwise.
//
// A launcher that picks a free port and lets the process bind it later leaves a window in
// which another process can take the port; with many stacks starting side by side, a
// gateway could then talk to another stack's service. A socket bound by the launcher and
// inherited has no such window.
package listenfd

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The first inherited descriptor (after stdin, stdout, stderr), as in sd_listen_fds(3).
const firstFD = 3

var (
	once      sync.Once
	mu        sync.Mutex
	inherited map[string]*os.File
)

// Listen returns the TCP listener the launcher passed under name, or else one bound here
// on addr. Each inherited socket is handed out once.
func Listen(name, addr string) (net.Listener, error) {
	once.Do(func() { inherited = fromEnv(os.Getenv, os.Getpid()) })
	mu.Lock()
	f := inherited[name]
	delete(inherited, name)
	mu.Unlock()
	if f == nil {
		return net.Listen("tcp", addr)
	}
	defer f.Close()
	lis, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("inherited %s socket (fd %d): %w", name, f.Fd(), err)
	}
	return lis, nil
}

// fromEnv reads the descriptors passed to pid; the variables are cleared so that nothing
// this process starts takes them for its own.
func fromEnv(getenv func(string) string, pid int) map[string]*os.File {
	n, err := strconv.Atoi(getenv("LISTEN_FDS"))
	if err != nil || n <= 0 {
		return nil
	}
	if p := getenv("LISTEN_PID"); p != "" && p != strconv.Itoa(pid) {
		return nil
	}
	names := strings.Split(getenv("LISTEN_FDNAMES"), ":")
	for _, v := range []string{"LISTEN_FDS", "LISTEN_FDNAMES", "LISTEN_PID"} {
		_ = os.Unsetenv(v)
	}
	files := make(map[string]*os.File, n)
	for i := range n {
		name := "unknown"
		if i < len(names) && names[i] != "" {
			name = names[i]
		}
		files[name] = os.NewFile(uintptr(firstFD+i), name)
	}
	return files
}

// Env is what a launcher sets for a child whose ExtraFiles are the sockets of names, in
// that order.
func Env(names []string) []string {
	return []string{
		"LISTEN_FDS=" + strconv.Itoa(len(names)),
		"LISTEN_FDNAMES=" + strings.Join(names, ":"),
	}
}
