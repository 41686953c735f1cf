package cli

import (
	"errors"
	"strconv"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitRuntime = 1 // the command ran and failed
	ExitUsage   = 2 // bad flags or arguments; also status of an unhealthy cluster
)

// ExitError ends the program with Code. Err, when not nil, is printed as
// "strata: <Err>".
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return "exit status " + strconv.Itoa(e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns an error that makes the program exit with code, printing err
// if it is not nil.
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// runtimeError marks an error returned by a command's body, as opposed to
// one cobra found in the flags or arguments before running it.
type runtimeError struct{ err error }

func (e *runtimeError) Error() string { return e.err.Error() }
func (e *runtimeError) Unwrap() error { return e.err }

// RunFunc is the body of a command.
type RunFunc func(cmd *cobra.Command, args []string) error

// Run adapts a command body for cobra's RunE: once the body runs, its
// errors are runtime errors (exit 1, no usage text), not usage errors.
func Run(f RunFunc) RunFunc {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		if err == nil {
			return nil
		}
		var ee *ExitError
		if errors.As(err, &ee) {
			return err
		}
		return &runtimeError{err: err}
	}
}

// ExitCode is the process exit code for the error a command returned:
// ExitError's code, ExitRuntime for errors from a command body (see Run),
// ExitUsage for anything else (cobra's flag and argument errors).
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var re *runtimeError
	if errors.As(err, &re) {
		return ExitRuntime
	}
	return ExitUsage
}

// Message is what to print for err after "strata: ", or "" for nothing.
func Message(err error) string {
	if err == nil {
		return ""
	}
	var ee *ExitError
	if errors.As(err, &ee) && ee.Err == nil {
		return ""
	}
	return err.Error()
}

// ServerMessage returns the message of the gRPC status inside err (what the
// server said, without the client's wrapping), or err's own message when it
// holds no status.
func ServerMessage(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Message()
	}
	return err.Error()
}
