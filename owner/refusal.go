package owner

import (
	"net/http"
	"strings"
)

// The refusal contract: how an Owner that serves HTTP says "not here" so
// that any client, and the leasehold gateway, retries elsewhere rather than
// failing the request (docs/gateway.md, "The Owner contract").
//
// An Owner refuses a request for a key it does not hold with 421
// Misdirected Request and RefusedHeader: not-owner. It refuses a request
// for a key whose range is moving (handed over, or not yet arrived) with
// 503 Service Unavailable, Retry-After and RefusedHeader: moving. Both say
// that nothing was done: the request may be sent again, to the Owner the
// Lookup names next, without harm.
const RefusedHeader = "Leasehold-Refused"

// Refusal is why an Owner refused a request.
type Refusal string

const (
	// RefusedNotOwner: this Owner holds no lease on the key (it never did,
	// its lease ended, or the key moved away). The client's copy of the
	// table is stale; it retries where the copy names next.
	RefusedNotOwner Refusal = "not-owner"
	// RefusedMoving: the key's range is moving with its state; the old
	// Owner no longer accepts, or the new one has not taken it yet. The
	// client retries after a short backoff.
	RefusedMoving Refusal = "moving"
)

// Refuse answers a request this Owner will not serve, in the contract's
// shape: 421 for RefusedNotOwner, 503 with Retry-After: 1 for
// RefusedMoving, with msg as a plain-text body. Any other reason is sent
// as RefusedNotOwner.
func Refuse(w http.ResponseWriter, why Refusal, msg string) {
	h := w.Header()
	if why == RefusedMoving {
		h.Set(RefusedHeader, string(RefusedMoving))
		h.Set("Retry-After", "1")
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	h.Set(RefusedHeader, string(RefusedNotOwner))
	http.Error(w, msg, http.StatusMisdirectedRequest)
}

// RefusalOf reports whether an answer is a refusal under the contract, and
// why. h holds the answer's headers and, for gRPC, its trailers too. A 421 without the header counts as RefusedNotOwner (421 means "not
// this server" in HTTP itself); a 503 counts only with the header, since an
// Owner may answer 503 for reasons of its own (overload) that a retry
// elsewhere would not help.
func RefusalOf(status int, h http.Header) (Refusal, bool) {
	v := Refusal(strings.TrimSpace(h.Get(RefusedHeader)))
	switch {
	case status == http.StatusMisdirectedRequest && v == RefusedMoving:
		return RefusedMoving, true
	case status == http.StatusMisdirectedRequest:
		return RefusedNotOwner, true
	case status == http.StatusServiceUnavailable && (v == RefusedMoving || v == RefusedNotOwner):
		return v, true
	case status == http.StatusOK && strings.HasPrefix(h.Get("Content-Type"), "application/grpc") &&
		h.Get("Grpc-Status") == "14" && (v == RefusedMoving || v == RefusedNotOwner):
		// A gRPC refusal (RefuseGRPC): a trailers-only answer, status
		// Unavailable, whose headers carry the refusal.
		return v, true
	}
	return "", false
}
