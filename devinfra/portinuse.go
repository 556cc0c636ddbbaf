package devinfra

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// PortInUse is the error of a server that cannot have the fixed port it was given
// (make run's): it names the port and, when /proc says, the process listening there, so
// that a second `make run` says what holds the port instead of only that a server did not
// start. errors.Is(err, syscall.EADDRINUSE) holds.
func PortInUse(what string, port int) error {
	msg := fmt.Sprintf("%s: port %d is already in use", what, port)
	if pid, name := listenerOf(port); pid > 0 {
		msg += fmt.Sprintf(" by %s (pid %d)", name, pid)
	}
	return &portInUseError{msg: msg}
}

type portInUseError struct{ msg string }

func (e *portInUseError) Error() string { return e.msg }
func (e *portInUseError) Unwrap() error { return syscall.EADDRINUSE }

// listenerOf finds the process holding a TCP socket that listens on port, from Linux's
// /proc (the socket's inode in /proc/net/tcp or tcp6, then the process with that socket
// open); 0 when it cannot tell (another user's process, no /proc).
func listenerOf(port int) (pid int, name string) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for _, inode := range listeningInodes(table, port) {
			inodes["socket:["+inode+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return 0, ""
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && inodes[link] {
			dir := filepath.Dir(filepath.Dir(fd))
			pid, _ = strconv.Atoi(filepath.Base(dir))
			comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
			return pid, strings.TrimSpace(string(comm))
		}
	}
	return 0, ""
}

// listeningInodes reads a /proc/net/tcp table (proc(5)) for the sockets in state LISTEN
// (0A) on port, on any address.
func listeningInodes(table string, port int) []string {
	f, err := os.Open(table)
	if err != nil {
		return nil
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	var inodes []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
			inodes = append(inodes, fields[9])
		}
	}
	return inodes
}
