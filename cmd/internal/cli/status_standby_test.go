package cli

import (
	"bytes"
	"strings"
	"testing"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// TestStatusShowsStandbys: in a namespace with standbys the owners' table
// shows each Owner's zone, the ranges it stands by for and how many are in
// sync; a namespace without them and without zones keeps today's table.
func TestStatusShowsStandbys(t *testing.T) {
	resp := &pb.StatusResponse{Epoch: 1, Namespaces: []*pb.NamespaceStatus{
		{Name: "queues", Segments: 4, Standbys: 1, Owners: []*pb.OwnerStatus{
			{Id: "kv-1", Addr: "a:1", Member: true, Ranges: 2, Zone: "eu-1a", StandbyRanges: 2, StandbyInSync: 1},
			{Id: "kv-2", Addr: "a:2", Member: true, Ranges: 2, StandbyRanges: 2, StandbyInSync: 2},
		}},
		{Name: "default", Segments: 1, Owners: []*pb.OwnerStatus{{Id: "kv-3", Addr: "a:3", Member: true, Ranges: 1}}},
	}}
	var out bytes.Buffer
	writeStatus(&out, resp)
	text := out.String()
	queues, plain, _ := strings.Cut(text, "namespace default")
	for _, want := range []string{"1 standby per range", "ZONE", "STANDBY-FOR", "IN-SYNC"} {
		if !strings.Contains(queues, want) {
			t.Errorf("namespace with standbys: no %q in\n%s", want, queues)
		}
	}
	for _, row := range [][]string{{"kv-1", "eu-1a", "2", "1"}, {"kv-2", "-", "2", "2"}} {
		found := false
		for _, line := range strings.Split(queues, "\n") {
			f := strings.Fields(line)
			if len(f) > 10 && f[0] == row[0] && f[8] == row[1] && f[9] == row[2] && f[10] == row[3] {
				found = true
			}
		}
		if !found {
			t.Errorf("no row %v (id, zone, standby-for, in-sync) in\n%s", row, queues)
		}
	}
	if strings.Contains(plain, "ZONE") || strings.Contains(plain, "standby") {
		t.Errorf("a namespace without standbys or zones shows them:\n%s", plain)
	}
}

// TestParseStandbys: --standbys takes NS=N or N (the default namespace),
// N from 0 to lease.MaxStandbys, of a namespace served.
func TestParseStandbys(t *testing.T) {
	got, err := parseStandbys([]string{"1", "queues=1", "presence=0"}, []string{"queues", "presence"})
	if err != nil || len(got) != 3 || got["default"] != 1 || got["queues"] != 1 || got["presence"] != 0 {
		t.Errorf("parseStandbys = %v, %v", got, err)
	}
	for _, bad := range []string{"2", "-1", "x", "queues=", "nope=1"} {
		if _, err := parseStandbys([]string{bad}, []string{"queues"}); err == nil || !strings.Contains(err.Error(), "--standbys") {
			t.Errorf("--standbys %q: %v, want an error naming the flag", bad, err)
		}
	}
}
