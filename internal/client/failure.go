package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// refusedWait is the least Keep waits after the Manager refused a stream
// outright (Refused): retrying sooner cannot help, since only a new
// certificate or a new grant of the namespace lifts the refusal.
const refusedWait = 5 * time.Second

// StreamError is why the last stream to the Manager failed before it
// carried a message: the address tried and gRPC's error, described in a
// few words by Error, the cause gRPC wraps kept (status.Code sees it).
type StreamError struct {
	Addr string
	Err  error
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("manager at %s: %s", e.Addr, Describe(e.Err))
}

func (e *StreamError) Unwrap() error { return e.Err }

// GRPCStatus lets status.Code and status.FromError see the stream's status.
func (e *StreamError) GRPCStatus() *status.Status {
	st, _ := status.FromError(e.Err)
	return st
}

// Describe turns a stream's error into the few words an operator acts on:
// gRPC's `connection error: desc = "transport: Error while dialing: dial tcp
// …: connect: connection refused"` becomes `dial tcp …: connect: connection
// refused`, and a TLS handshake's failure keeps the certificate's reason
// (certs.ErrUnknownCA names the CA). A refusal keeps the Manager's message.
func Describe(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	msg := strings.TrimPrefix(st.Message(), "leasehold: ")
	if _, quoted, ok := strings.Cut(msg, "desc = "); ok {
		msg = quoted
		if s, err := strconv.Unquote(quoted); err == nil {
			msg = s
		}
	}
	msg = strings.TrimPrefix(msg, "transport: ")
	if _, cause, ok := strings.Cut(msg, "Error while dialing: "); ok {
		msg = cause
	} else if _, cause, ok := strings.Cut(msg, "authentication handshake failed: "); ok {
		msg = "TLS handshake failed: " + strings.TrimPrefix(cause, "leasehold: ")
	}
	switch st.Code() {
	case codes.PermissionDenied, codes.Unauthenticated:
		return "refused: " + msg
	}
	return msg
}

// Refused reports whether err is the Manager's refusal of the client
// itself (its certificate, role or namespace), which retrying does not
// lift, rather than a failure to reach it.
func Refused(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// LastError returns why the last stream Keep opened failed before it
// carried a message, as a *StreamError, or nil when none failed since a
// stream last worked.
func (m *Managers) LastError() error {
	if p := m.failed.Load(); p != nil {
		return p
	}
	return nil
}

// setFailed records the failure of the stream to addr; a nil err clears it.
func (m *Managers) setFailed(addr string, err error) {
	if err == nil {
		m.failed.Store(nil)
		return
	}
	m.failed.Store(&StreamError{Addr: addr, Err: err})
}
