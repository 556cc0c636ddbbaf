package edge

import (
	"context"
	"net/http"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// secretFields are the names of answer fields that hold a credential: an activation
// token, an API key, a console session token, a signing secret.
var secretFields = map[protoreflect.Name]bool{
	"token": true, "api_key": true, "apiKey": true, "session_token": true, "secret": true, "signing_secret": true,
}

// noStoreSecrets is the gateway's forward-response option: an answer whose message can
// carry a credential (secretFields, at any depth) is sent with Cache-Control: no-store,
// so no browser, proxy or CDN keeps a copy of it.
func noStoreSecrets(_ context.Context, w http.ResponseWriter, m proto.Message) error {
	if carriesSecret(m.ProtoReflect().Descriptor()) {
		w.Header().Set("Cache-Control", "no-store")
	}
	return nil
}

var secretCarriers sync.Map // protoreflect.FullName → bool

func carriesSecret(md protoreflect.MessageDescriptor) bool {
	if v, ok := secretCarriers.Load(md.FullName()); ok {
		return v.(bool)
	}
	found := scanForSecrets(md, map[protoreflect.FullName]bool{})
	secretCarriers.Store(md.FullName(), found)
	return found
}

func scanForSecrets(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Kind() == protoreflect.StringKind && (secretFields[fd.Name()] || secretFields[protoreflect.Name(fd.JSONName())]) {
			return true
		}
		if fd.Message() != nil && scanForSecrets(fd.Message(), seen) {
			return true
		}
	}
	return false
}
