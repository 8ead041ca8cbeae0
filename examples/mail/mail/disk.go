package mail

import (
	"bufio"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/keyspace"
)

// Message is one delivered message. ID is the sender's, unique per user
// (Client.Deliver draws a random one); At is when a node stored it.
type Message struct {
	ID   string    `json:"id"`
	Body string    `json:"body"`
	At   time.Time `json:"at"`
}

// disk is a node's mailbox fragments: one append-only file per user, one
// JSON line per message, synced before it is acknowledged. The users are
// indexed by key in memory, so a range's users cost a binary search
// (Porcupine's bucketed directories serve the same end).
type disk struct {
	dir     string
	pending atomic.Int64 // disk operations under way: the node's load
	mu      sync.Mutex
	byKey   []indexed // guarded by mu; sorted by key, then name
}

type indexed struct {
	key  keyspace.Key
	user string
}

func compareIndexed(a, b indexed) int {
	return cmp.Or(cmp.Compare(a.key, b.key), strings.Compare(a.user, b.user))
}

func openDisk(dir string) (*disk, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	d := &disk{dir: dir}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".mbox")
		if u, err := hex.DecodeString(name); ok && err == nil {
			d.byKey = append(d.byKey, indexed{keyspace.KeyOf(string(u)), string(u)})
		}
	}
	slices.SortFunc(d.byKey, compareIndexed)
	return d, nil
}

func (d *disk) path(user string) string {
	return filepath.Join(d.dir, hex.EncodeToString([]byte(user))+".mbox")
}

// store appends m to user's fragment and syncs it.
func (d *disk) store(user string, m Message) error {
	d.pending.Add(1)
	defer d.pending.Add(-1)
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	d.mu.Lock() // one writer at a time: lines never interleave
	defer d.mu.Unlock()
	f, err := os.OpenFile(d.path(user), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	e := indexed{keyspace.KeyOf(user), user}
	if i, found := slices.BinarySearchFunc(d.byKey, e, compareIndexed); err == nil && !found {
		d.byKey = slices.Insert(d.byKey, i, e)
	}
	return err
}

// fetch reads user's fragment, skipping a torn (never acknowledged) last line.
func (d *disk) fetch(user string) ([]Message, error) {
	d.pending.Add(1)
	defer d.pending.Add(-1)
	f, err := os.Open(d.path(user))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Message
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 2*MaxMessageBytes)
	for sc.Scan() {
		var m Message
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading %s's fragment: %w", user, err)
	}
	return out, nil
}

// usersIn lists the users with a fragment here whose keys lie in r.
func (d *disk) usersIn(r keyspace.Range) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	i, _ := slices.BinarySearchFunc(d.byKey, r.Start, func(e indexed, k keyspace.Key) int { return cmp.Compare(e.key, k) })
	var out []string
	for ; i < len(d.byKey) && r.Contains(d.byKey[i].key); i++ {
		out = append(out, d.byKey[i].user)
	}
	return out
}
