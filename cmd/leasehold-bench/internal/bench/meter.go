package bench

import (
	"time"

	"github.com/leasehold/leasehold/internal/sim"
)

// meter is a sim.Probe that adds up the Manager's work and traffic per
// bucket of virtual time.
type meter struct {
	bucket   time.Duration
	work     []time.Duration // real time in the leader replica, per bucket
	in, out  []int64         // bytes per bucket
	messages []int64
}

var _ sim.Probe = (*meter)(nil)

func newMeter(bucket time.Duration) *meter { return &meter{bucket: bucket} }

func (m *meter) index(at time.Duration) int {
	i := int(at / m.bucket)
	for len(m.work) <= i {
		m.work = append(m.work, 0)
		m.in = append(m.in, 0)
		m.out = append(m.out, 0)
		m.messages = append(m.messages, 0)
	}
	return i
}

func (m *meter) ManagerWork(at, took time.Duration) { m.work[m.index(at)] += took }

func (m *meter) ManagerTraffic(at time.Duration, bytes int, out bool) {
	i := m.index(at)
	m.messages[i]++
	if out {
		m.out[i] += int64(bytes)
	} else {
		m.in[i] += int64(bytes)
	}
}

// window sums buckets [from, to) of virtual time.
func (m *meter) window(from, to time.Duration) (cpu float64, bytesPerSec float64, msgsPerSec float64) {
	var w time.Duration
	var b, n int64
	lo, hi := int(from/m.bucket), int(to/m.bucket)
	for i := lo; i < hi && i < len(m.work); i++ {
		w += m.work[i]
		b += m.in[i] + m.out[i]
		n += m.messages[i]
	}
	secs := (to - from).Seconds()
	return w.Seconds() / secs, float64(b) / secs, float64(n) / secs
}

// series returns, per bucket up to end, the bucket's start in minutes, the
// CPU as a percentage of one core, and the network load in KB/s.
func (m *meter) series(end time.Duration) (minutes, cpuPct, kbps []float64) {
	m.index(end - 1)
	secs := m.bucket.Seconds()
	for i := 0; i < int(end/m.bucket); i++ {
		minutes = append(minutes, (time.Duration(i) * m.bucket).Minutes())
		cpuPct = append(cpuPct, 100*m.work[i].Seconds()/secs)
		kbps = append(kbps, float64(m.in[i]+m.out[i])/1000/secs)
	}
	return
}
