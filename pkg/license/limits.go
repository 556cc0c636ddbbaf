package license

import (
	"sort"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"google.golang.org/protobuf/types/known/structpb"
)

// ParseLimits checks a limits object as issue-license takes it (and the storefront's
// mappings, which become issue-license requests): allowlisted keys, with api.md's exact
// 400 `Unknown limit key: <key>` for others, and positive numbers that stay exact in JSON.
// A nil object is {}.
func ParseLimits(s *structpb.Struct) (map[string]float64, error) {
	out := map[string]float64{}
	names := make([]string, 0, len(s.GetFields()))
	for name := range s.GetFields() {
		names = append(names, name)
	}
	// Sorted, so a request with several bad keys always names the same one.
	sort.Strings(names)
	for _, name := range names {
		if !LimitKeys[name] {
			// api.md's text, byte for byte: it names the key, unlike input.NotOneOf.
			return nil, apierr.Invalid("Unknown limit key: %s", name)
		}
	}
	for _, name := range names {
		n, ok := s.GetFields()[name].GetKind().(*structpb.Value_NumberValue)
		if !ok || !(n.NumberValue > 0) || n.NumberValue > signing.MaxSafeInteger {
			return nil, apierr.Invalid("limits.%s must be a positive number of at most %d", name, signing.MaxSafeInteger)
		}
		out[name] = n.NumberValue
	}
	return out, nil
}
