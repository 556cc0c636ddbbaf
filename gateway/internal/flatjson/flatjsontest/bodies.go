// Package flatjsontest makes the request bodies of the tests that hold the gateway's
// hand-written JSON readers (flatjson and its callers) to encoding/json's and
// protojson's answers.
package flatjsontest

import (
	"iter"
	"math/rand/v2"
	"strings"
)

// Bodies yields n bodies, each of up to maxParts-1 fragments drawn at random: mostly
// near misses of the plain shape, and some of the shape itself. The seed fixes them, so
// a failure names a body every run makes.
func Bodies(seed uint64, n, maxParts int, fragments []string) iter.Seq[string] {
	return func(yield func(string) bool) {
		r := rand.New(rand.NewPCG(27, seed))
		for range n {
			var b strings.Builder
			for range r.IntN(maxParts) {
				b.WriteString(fragments[r.IntN(len(fragments))])
			}
			if !yield(b.String()) {
				return
			}
		}
	}
}
