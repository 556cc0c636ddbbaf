package mailtest

import (
	"encoding/base64"
	"io"
	"mime"
	"mime/quotedprintable"
	"strings"
)

type mimeDecoder struct{ mime.WordDecoder }

func (d *mimeDecoder) header(v string) (string, error) { return d.DecodeHeader(v) }

func decodeBody(encoding string, r io.Reader) (string, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, &stripNewlines{r: r})
	}
	b, err := io.ReadAll(r)
	return strings.ReplaceAll(string(b), "\r\n", "\n"), err
}

type stripNewlines struct{ r io.Reader }

func (s *stripNewlines) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	j := 0
	for _, c := range p[:n] {
		if c != '\r' && c != '\n' {
			p[j] = c
			j++
		}
	}
	return j, err
}
