package server

import (
	"math"
	"strings"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"google.golang.org/protobuf/types/known/structpb"
)

// ReservedProductPrefix marks the internal self-licensing credential's product.
const ReservedProductPrefix = "_service_"

// Field caps. api.md leaves license field sizes open; these keep rows and exports sane.
const (
	maxIDLen    = 200
	maxTextLen  = 1000
	maxNotesLen = 10000
	// maxActivationsCap bounds max_activations to what the column holds.
	maxActivationsCap = math.MaxInt32
)

func requireText(name, v string, maxLen int) (string, error) {
	if strings.TrimSpace(v) == "" {
		return "", apierr.Invalid("%s is required", name)
	}
	if !utf8.ValidString(v) || utf8.RuneCountInString(v) > maxLen {
		return "", apierr.Invalid("%s must be at most %d characters", name, maxLen)
	}
	return v, checkNUL(name, v)
}

// checkNUL refuses U+0000, which Postgres text cannot hold (pgxx.HasNUL).
func checkNUL(name, v string) error {
	if pgxx.HasNUL(v) {
		return apierr.Invalid("%s must not contain NUL characters", name)
	}
	return nil
}

// optionalCap reads max_activations: a positive integer, or null for unlimited.
func optionalCap(v *structpb.Value) (*int32, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return nil, nil
	case *structpb.Value_NumberValue:
		n := k.NumberValue
		if n >= 1 && n <= maxActivationsCap && n == math.Trunc(n) {
			c := int32(n)
			return &c, nil
		}
	}
	return nil, apierr.Invalid("max_activations must be a positive integer of at most %d or null (unlimited)", maxActivationsCap)
}

// parseLimits is license.ParseLimits, the one limits rule (issue-license, terms, storefront mappings).
func parseLimits(s *structpb.Struct) (map[string]float64, error) { return license.ParseLimits(s) }

// limitsStruct is the JSON form of stored limits.
func limitsStruct(m map[string]float64) *structpb.Struct {
	s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(m))}
	for k, v := range m {
		s.Fields[k] = structpb.NewNumberValue(v)
	}
	return s
}
