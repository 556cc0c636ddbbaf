package signing

// AppendString appends s to b quoted exactly as Marshal quotes a string, for callers that
// write a hot document by hand and must match Marshal byte for byte.
func AppendString(b []byte, s string) ([]byte, error) {
	e := encoder{buf: b}
	err := e.str(s)
	return e.buf, err
}

// AppendValue appends Marshal's encoding of v to b.
func AppendValue(b []byte, v any) ([]byte, error) {
	e := encoder{buf: b}
	err := e.value(v, 0)
	return e.buf, err
}
