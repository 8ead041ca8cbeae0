package owner_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/owner"
)

func TestRefuse(t *testing.T) {
	for _, tc := range []struct {
		why        owner.Refusal
		code       int
		header     string
		retryAfter bool
	}{
		{owner.RefusedNotOwner, http.StatusMisdirectedRequest, "not-owner", false},
		{owner.RefusedMoving, http.StatusServiceUnavailable, "moving", true},
		{"bogus", http.StatusMisdirectedRequest, "not-owner", false},
	} {
		w := httptest.NewRecorder()
		owner.Refuse(w, tc.why, "range 0x10-0x20 is elsewhere")
		if w.Code != tc.code || w.Header().Get(owner.RefusedHeader) != tc.header || (w.Header().Get("Retry-After") != "") != tc.retryAfter {
			t.Errorf("Refuse(%q) = %d %s=%q Retry-After=%q, want %d %q (Retry-After %v)", tc.why, w.Code, owner.RefusedHeader,
				w.Header().Get(owner.RefusedHeader), w.Header().Get("Retry-After"), tc.code, tc.header, tc.retryAfter)
		}
		if !strings.Contains(w.Body.String(), "is elsewhere") {
			t.Errorf("Refuse(%q) body %q lacks the message", tc.why, w.Body.String())
		}
		got, ok := owner.RefusalOf(w.Code, w.Header())
		if want := owner.Refusal(tc.header); !ok || got != want {
			t.Errorf("RefusalOf(Refuse(%q)) = %q %v, want %q true", tc.why, got, ok, want)
		}
	}
}

func TestRefusalOf(t *testing.T) {
	h := func(v string) http.Header {
		h := http.Header{}
		if v != "" {
			h.Set(owner.RefusedHeader, v)
		}
		return h
	}
	for _, tc := range []struct {
		code   int
		header string
		want   owner.Refusal
		ok     bool
	}{
		{421, "", owner.RefusedNotOwner, true},
		{421, "moving", owner.RefusedMoving, true},
		{503, "", "", false}, // the Owner's own overload: not a refusal
		{503, "moving", owner.RefusedMoving, true},
		{503, "not-owner", owner.RefusedNotOwner, true},
		{200, "moving", "", false},
		{500, "not-owner", "", false},
		{200, "grpc:14", owner.RefusedNotOwner, true},
		{200, "grpc:14:moving", owner.RefusedMoving, true},
		{200, "grpc:0", "", false},    // a gRPC answer that is not a refusal
		{200, "grpc:14:-", "", false}, // the Owner's own Unavailable
	} {
		hd := h(tc.header)
		if g, ok := strings.CutPrefix(tc.header, "grpc:"); ok {
			st, why, _ := strings.Cut(g, ":")
			if why == "" {
				why = "not-owner"
			}
			hd = http.Header{"Content-Type": {"application/grpc"}, "Grpc-Status": {st}}
			if why != "-" && st != "0" {
				hd.Set(owner.RefusedHeader, why)
			}
		}
		got, ok := owner.RefusalOf(tc.code, hd)
		if got != tc.want || ok != tc.ok {
			t.Errorf("RefusalOf(%d, %q) = %q %v, want %q %v", tc.code, tc.header, got, ok, tc.want, tc.ok)
		}
	}
}
