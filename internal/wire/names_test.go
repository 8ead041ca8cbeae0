package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/proto/leasehold/v1"
)

func renewal(seq uint64) *leaseholdv1.LeaseRequest {
	return &leaseholdv1.LeaseRequest{Namespace: "default", Owner: "owner-1", Addr: "127.0.0.1:9000",
		Incarnation: 7, Seq: seq, AckEpoch: 3, AckSeq: seq - 1, HeldAsAcked: true}
}

func answer(seq uint64) *leaseholdv1.LeaseResponse {
	return &leaseholdv1.LeaseResponse{Namespace: "default", Owner: "owner-1", Incarnation: 7, Epoch: 3,
		Seq: seq, AckSeq: seq, OwnerLeaseNanos: 4e9, RenewNanos: 1e9, RenewHeld: true}
}

// Names said once per stream: after the first message each way they are
// left out, and the other end puts them back, so that every message reads
// as the full one.
func TestNamesOnceRoundTrip(t *testing.T) {
	var o OwnerNames
	var m ManagerNames
	for seq := uint64(2); seq < 6; seq++ {
		req := renewal(seq)
		wireReq := o.Send(req)
		if seq > 2 && (wireReq.Owner != "" || wireReq.Namespace != "" || wireReq.Addr != "") {
			t.Errorf("request %d still carries its names: %v", seq, wireReq)
		}
		if seq == 2 && wireReq.Owner == "" {
			t.Errorf("the stream's first request left its names out")
		}
		got := proto.Clone(wireReq).(*leaseholdv1.LeaseRequest)
		m.Recv(got)
		if want := renewal(seq); !proto.Equal(withoutNamesOnce(got), want) {
			t.Errorf("request %d read as %v, want %v", seq, got, want)
		}
		if req.Owner != "owner-1" {
			t.Errorf("Send changed the request it was given: %v", req)
		}

		resp := answer(seq)
		m.Send(resp)
		if !resp.NamesOnce {
			t.Errorf("response %d does not say names_once", seq)
		}
		if seq > 2 && (resp.Owner != "" || resp.Namespace != "" || resp.Incarnation != 0 || resp.RenewNanos != 0) {
			t.Errorf("response %d still carries its names: %v", seq, resp)
		}
		o.Recv(resp)
		if want := answer(seq); !proto.Equal(withoutNamesOnceResp(resp), want) {
			t.Errorf("response %d read as %v, want %v", seq, resp, want)
		}
	}
}

// An end that does not say names_once always gets, and is always sent,
// full names: an Owner leaves nothing out until the Manager said
// names_once on the stream, and a Manager leaves nothing out on a stream
// whose requests do not say it.
func TestNamesOnceNeedsBothEnds(t *testing.T) {
	var o OwnerNames
	for seq := uint64(2); seq < 5; seq++ {
		if r := o.Send(renewal(seq)); r.Owner == "" {
			t.Fatalf("request %d left its names out before the Manager said names_once", seq)
		}
		resp := answer(seq) // an older Manager: no names_once
		o.Recv(resp)
	}
	var m ManagerNames
	for seq := uint64(2); seq < 5; seq++ {
		req := renewal(seq) // an older Owner: no names_once
		m.Recv(req)
		resp := answer(seq)
		m.Send(resp)
		if resp.Owner == "" || resp.NamesOnce {
			t.Fatalf("response %d to an Owner that did not say names_once: %v", seq, resp)
		}
	}
	// A request without names and without names_once is left as it is,
	// and fails validation.
	var m2 ManagerNames
	first := renewal(2)
	first.NamesOnce = true
	m2.Recv(first)
	bare := &leaseholdv1.LeaseRequest{Incarnation: 7, Seq: 3}
	m2.Recv(bare)
	if _, err := LeaseRequestFromPB(bare); err == nil {
		t.Errorf("a request without names, not saying names_once, was accepted: %v", bare)
	}
}

// Names that change on a stream travel in full, and become the ones put
// back from then on.
func TestNamesOnceFollowsAChange(t *testing.T) {
	var o OwnerNames
	var m ManagerNames
	step := func(req *leaseholdv1.LeaseRequest) *leaseholdv1.LeaseRequest {
		w := proto.Clone(o.Send(req)).(*leaseholdv1.LeaseRequest)
		m.Recv(w)
		resp := answer(req.Seq)
		m.Send(resp)
		o.Recv(resp)
		return w
	}
	step(renewal(2))
	moved := renewal(3)
	moved.Addr = "127.0.0.1:9001"
	if w := step(moved); w.Addr != "127.0.0.1:9001" {
		t.Errorf("a new address was not sent: %v", w)
	}
	w := step(renewal2(4, "127.0.0.1:9001"))
	if w.Addr != "127.0.0.1:9001" || w.Owner != "owner-1" {
		t.Errorf("after the change, the names read back as %q %q", w.Owner, w.Addr)
	}
}

func renewal2(seq uint64, addr string) *leaseholdv1.LeaseRequest {
	r := renewal(seq)
	r.Addr = addr
	return r
}

func withoutNamesOnce(m *leaseholdv1.LeaseRequest) *leaseholdv1.LeaseRequest {
	c := proto.Clone(m).(*leaseholdv1.LeaseRequest)
	c.NamesOnce = false
	return c
}

func withoutNamesOnceResp(m *leaseholdv1.LeaseResponse) *leaseholdv1.LeaseResponse {
	c := proto.Clone(m).(*leaseholdv1.LeaseResponse)
	c.NamesOnce = false
	return c
}
