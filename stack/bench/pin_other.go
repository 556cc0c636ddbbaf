//go:build !linux

package bench

import (
	"context"
	"errors"

	"github.com/keyhouse/keyhouse/stack"
)

// Pin is Linux only (CPU masks).
func Pin(context.Context, *stack.Stack) error { return errors.New("-pin needs Linux") }

// onStackSide has nothing to do where Pin cannot run.
func onStackSide(int) error { return nil }
