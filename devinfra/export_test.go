package devinfra

// SetFreePort has the servers started on port 0 take their ports from next, until
// restore is called.
func SetFreePort(next func() (int, error)) (restore func()) {
	old := freePort
	freePort = next
	return func() { freePort = old }
}
