package sim

import (
	crand "crypto/rand"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
)

// etcd raft draws its randomised election timeouts from crypto/rand.Reader
// (raft.go's lockedRand), the one source of randomness a run does not get
// from its Config. Every Manager replica draws from it — a single replica
// too: it campaigns after a random 10–19 ticks — so a run replays exactly
// only if those draws come from its seed.
//
// crypto/rand.Reader is one variable for the whole process, while tests
// run many seeds at once, each in its own goroutine. Swapping in one seeded
// reader per run would need every run serialised behind a mutex — halving
// the sweeps on two cores — or the runs would steal each other's bytes and
// replay nothing. So the package installs a dispatching reader instead: it
// serves each goroutine registered by Run from that run's seeded stream,
// and every other goroutine from the reader it replaced. It is installed
// once, when the package is initialised, before any goroutine of the
// process can be reading the variable: writing it later, while a real
// Manager or a TLS handshake elsewhere in the same process reads it, is a
// data race. A run drives all its replicas from the goroutine that called
// Run, so the goroutine names the run.
var raftRand struct {
	sync.Mutex
	old  io.Reader
	runs map[uint64]io.Reader // goroutine ID → the run's stream
}

func init() {
	raftRand.old = crand.Reader
	raftRand.runs = map[uint64]io.Reader{}
	crand.Reader = dispatchReader{}
}

// seedRaftRand makes the calling goroutine's draws from crypto/rand.Reader
// come from a stream seeded by seed, until the returned function is called.
func seedRaftRand(seed uint64) (restore func()) {
	id := goid()
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	copy(key[8:], "leasehold sim: raft elections")
	raftRand.Lock()
	defer raftRand.Unlock()
	raftRand.runs[id] = rand.NewChaCha8(key)
	return func() {
		raftRand.Lock()
		defer raftRand.Unlock()
		delete(raftRand.runs, id)
	}
}

type dispatchReader struct{}

func (dispatchReader) Read(p []byte) (int, error) {
	id := goid()
	raftRand.Lock()
	r, ok := raftRand.runs[id]
	if !ok {
		r = raftRand.old
	}
	raftRand.Unlock()
	return r.Read(p) // a run's stream is only read from its own goroutine
}

// goid returns the calling goroutine's ID, from the first line of its stack
// trace ("goroutine 42 [running]:"). Raft draws only when a replica changes
// role, so the cost does not matter.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) {
		panic("sim: unexpected stack trace format")
	}
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	if id == 0 {
		panic("sim: unexpected stack trace format")
	}
	return id
}
