// Package grpcxtest is what tests of gRPC handlers share: the server side of a call, for
// handlers tested as plain functions.
package grpcxtest

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Stream is the server side of a call as grpc.SetHeader and grpc.Method see it: it keeps
// the response header set so far and counts the writes that set it (gRPC copies the
// header at each one, so the count is a cost a test can bound).
type Stream struct {
	FullMethod string

	mu     sync.Mutex
	header metadata.MD
	writes int
}

// Call returns ctx as the server side of a call of method, and that call's Stream.
func Call(ctx context.Context, method string) (context.Context, *Stream) {
	s := &Stream{FullMethod: method}
	return grpc.NewContextWithServerTransportStream(ctx, s), s
}

// Header is the response header set so far, and the number of writes that set it.
func (s *Stream) Header() (metadata.MD, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header.Copy(), s.writes
}

func (s *Stream) Method() string { return s.FullMethod }

func (s *Stream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *Stream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *Stream) SetTrailer(metadata.MD) error    { return nil }
