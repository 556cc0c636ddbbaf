package main

import (
	"bytes"
	"os"
	"testing"
)

// The committed vectors are what the generator writes from the committed keys.
func TestCommittedVectorsAreReproducible(t *testing.T) {
	committed, err := os.ReadFile("../../../testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(generate("../../../testdata/keys"), committed) {
		t.Fatal("clients/testdata/vectors.json differs from a fresh generation: cd clients/go && go run ./internal/vectorgen, and commit")
	}
}
