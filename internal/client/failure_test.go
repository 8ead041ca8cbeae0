package client

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDescribe checks the stream errors an operator sees are cut to their
// cause, and a refusal is marked as one.
func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		err     error
		want    string
		refused bool
	}{
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`),
			"dial tcp 127.0.0.1:1: connect: connection refused", false},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: leasehold: the server presented a bad certificate: certs: certificate \"replica 1\" is signed by an unknown authority (not this group's CA): issued by \"CA 2\""`),
			`TLS handshake failed: the server presented a bad certificate: certs: certificate "replica 1" is signed by an unknown authority (not this group's CA): issued by "CA 2"`, false},
		{status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`), "error reading server preface: EOF", false},
		{status.Error(codes.PermissionDenied, `leasehold: owner "kv-1" may not hold leases in namespace "x"`),
			`refused: owner "kv-1" may not hold leases in namespace "x"`, true},
		{context.DeadlineExceeded, "no answer in time", false},
		{errors.New("closed"), "closed", false},
	} {
		if got := Describe(tc.err); got != tc.want {
			t.Errorf("Describe(%v) = %q; want %q", tc.err, got, tc.want)
		}
		se := &StreamError{Addr: "a:1", Err: tc.err}
		if got := Refused(se); got != tc.refused {
			t.Errorf("Refused(%v) = %t; want %t", se, got, tc.refused)
		}
		if got, want := se.Error(), "manager at a:1: "+tc.want; got != want {
			t.Errorf("StreamError = %q; want %q", got, want)
		}
	}
}
