package replica

import (
	"encoding/json"
	"fmt"

	"github.com/leasehold/leasehold/internal/lease"
)

// batch is one Raft entry: the Changes of one round of the leader's Core.
// Node, Term and Seq name the proposal, so the leader that made it can
// release the messages it held until the entry committed.
type batch struct {
	Node    uint64         `json:"n"`
	Term    uint64         `json:"t"`
	Seq     uint64         `json:"s"`
	Changes []lease.Change `json:"c,omitempty"`
}

func encodeBatch(b batch) []byte {
	data, err := json.Marshal(b)
	if err != nil {
		panic(fmt.Sprintf("manager: encoding batch: %v", err))
	}
	return data
}

func decodeBatch(data []byte) (batch, error) {
	var b batch
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("%w: entry: %v", lease.ErrCorrupt, err)
	}
	return b, nil
}
