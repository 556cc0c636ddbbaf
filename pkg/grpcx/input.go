package grpcx

import (
	"bytes"
	"context"
	"crypto/rand"
	"strings"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/input"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The services' half of the input policy (docs/ARCHITECTURE.md, Input policy): every
// request reaching a service over gRPC, from the REST edge or from a direct caller, passes
// the check the edge's decoder applies (input.CheckMessage), and is refused with the
// same InvalidArgument and words. A request gRPC cannot decode (a string field that is
// not UTF-8, bytes that are no protobuf message) is refused as InvalidArgument too, once
// the call is in the interceptor chain, so it is logged and counted as any call is.

// MalformedMessage answers a request whose bytes are no protobuf message of the method's
// request type (the REST edge's "Invalid JSON body" for a body that is no JSON).
const MalformedMessage = "Invalid protobuf message"

// policyExempt are the methods whose contract answers any input itself: validate-license
// answers anything it cannot validate {"valid": false} (api.md), and the webhook
// receivers answer a signature header that does not verify as such, whatever its bytes.
var policyExempt = map[string]bool{
	"/keyhouse.activations.v1.ActivationsService/ValidateLicense":      true,
	"/keyhouse.activations.v1.ActivationsService/ValidateLicenseBatch": true,
	"/keyhouse.billing.v1.BillingService/HandleStripeEvent":            true,
	"/keyhouse.storefront.v1.StorefrontService/ReceiveEvent":           true,
}

// inputUnary applies the input policy to the request of every call but health's and
// reflection's, and answers a request the codec could not decode (deferredRefusal).
func inputUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, ok := req.(proto.Message)
	if !ok || strings.HasPrefix(info.FullMethod, "/grpc.") {
		return handler(ctx, req)
	}
	r := m.ProtoReflect()
	if refusal, ok := deferredRefusal(r); ok {
		return nil, apierr.Invalid("%s", refusal)
	}
	if !policyExempt[info.FullMethod] {
		if err := input.CheckMessage(r); err != nil {
			return nil, apierr.Invalid("%s", err.Error())
		}
	}
	return handler(ctx, req)
}

// requestCodec is the servers' codec: protobuf, as gRPC's own, but a request of a
// Keyhouse method that does not decode is not an error. gRPC answers a codec's error
// itself, as Internal "grpc: failed to unmarshal the received message: …", before any
// interceptor runs (so the call was neither logged nor counted). Instead the message is
// left empty but for a refusal carried in its unknown fields (refusalField, behind this
// process's random refusalMark, which no client can send), and inputUnary answers it.
// Messages of other types (health's, reflection's streams) fail as before.
type requestCodec struct{ encoding.CodecV2 }

func newRequestCodec() requestCodec {
	return requestCodec{encoding.GetCodecV2(protocodec.Name)}
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok || !strings.HasPrefix(string(m.ProtoReflect().Descriptor().FullName()), "keyhouse.") {
		return err
	}
	r := m.ProtoReflect()
	refusal := describeMalformed(r.Descriptor(), data.Materialize())
	proto.Reset(m)
	mark := protowire.AppendTag(nil, refusalField, protowire.BytesType)
	mark = protowire.AppendBytes(mark, append(append([]byte(nil), refusalMark...), refusal...))
	r.SetUnknown(mark)
	return nil
}

// refusalField is the field number of a deferred refusal: the highest there is, which no
// Keyhouse message uses.
const refusalField protowire.Number = protowire.MaxValidNumber

// refusalMark begins a deferred refusal; it is random per process, so a client cannot
// send one (an unknown field a client sends is ignored, as protobuf ignores it).
var refusalMark = func() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return b
}()

// deferredRefusal is the refusal requestCodec left in r, if any.
func deferredRefusal(r protoreflect.Message) (string, bool) {
	unknown := r.GetUnknown()
	if len(unknown) == 0 {
		return "", false
	}
	num, typ, n := protowire.ConsumeTag(unknown)
	if n < 0 || num != refusalField || typ != protowire.BytesType {
		return "", false
	}
	v, m := protowire.ConsumeBytes(unknown[n:])
	if m < 0 || !bytes.HasPrefix(v, refusalMark) {
		return "", false
	}
	return string(v[len(refusalMark):]), true
}

// describeMalformed words the refusal of b, bytes that do not decode as a message of
// type md: the first string field (in the bytes' order, nested messages included) that is
// not UTF-8, named as the REST edge names it, or MalformedMessage.
func describeMalformed(md protoreflect.MessageDescriptor, b []byte) string {
	if field := notUTF8Field(md, b, 0); field != "" {
		return input.Describe(field, input.NotUTF8)
	}
	return MalformedMessage
}

// maxMalformedDepth bounds the walk of nested messages (protobuf's own limit is 10,000).
const maxMalformedDepth = 100

func notUTF8Field(md protoreflect.MessageDescriptor, b []byte, depth int) string {
	if depth > maxMalformedDepth {
		return ""
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		switch {
		case fd == nil:
		case fd.IsMap() || fd.Kind() == protoreflect.MessageKind && fd.Message().FullName().Parent() == "google.protobuf":
			// A map's entry (key and value) or a google.protobuf value (notes' Value): the
			// field is what the client named.
			if notUTF8Field(fd.Message(), v, depth+1) != "" {
				return string(fd.Name())
			}
		case fd.Kind() == protoreflect.StringKind:
			if !utf8.Valid(v) {
				return string(fd.Name())
			}
		case fd.Kind() == protoreflect.MessageKind:
			if field := notUTF8Field(fd.Message(), v, depth+1); field != "" {
				return field
			}
		}
	}
	return ""
}
