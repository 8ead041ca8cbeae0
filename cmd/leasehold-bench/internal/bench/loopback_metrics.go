package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/certs"
)

// The Manager's own view of its answers: leasehold_renewal_answer_seconds,
// from an Owner's request arriving at the Manager to its answer being
// handed to the Owner's stream. Read from its metrics listener before and
// after a window, it separates the Manager's part of a round trip from the
// sockets, the scheduling of both processes and the driver's own work,
// which the driver's round trips include.

const renewalHistogram = "leasehold_renewal_answer_seconds_bucket"

// freeLoopbackAddr returns a port on 127.0.0.1 free at the time of asking.
func freeLoopbackAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// managerMetrics reads the Manager's metrics listener at addr.
type managerMetrics struct {
	url    string
	client *http.Client
}

func newManagerMetrics(addr string, trust *loopbackTrust) (*managerMetrics, error) {
	m := &managerMetrics{url: "http://" + addr + "/metrics", client: &http.Client{Timeout: 10 * time.Second}}
	if trust != nil {
		src, err := certs.Open(trust.dir, certs.Operator, "bench")
		if err != nil {
			return nil, err
		}
		m.url = "https://" + addr + "/metrics"
		m.client.Transport = src.HTTPTransport(certs.Replica)
	}
	return m, nil
}

// answerBuckets returns the cumulative counts of the answer histogram, by
// upper bound in seconds, in the order the Manager lists them.
func (m *managerMetrics) answerBuckets(ctx context.Context) ([]bucket, error) {
	var out []bucket
	err := m.lines(ctx, func(line string) error {
		rest, ok := strings.CutPrefix(line, renewalHistogram+`{le="`)
		if !ok {
			return nil
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			return nil
		}
		var err error
		b := bucket{}
		if le == "+Inf" {
			b.le = -1
		} else if b.le, err = strconv.ParseFloat(le, 64); err != nil {
			return fmt.Errorf("%s: bucket %q: %v", m.url, le, err)
		}
		if b.n, err = strconv.ParseFloat(count, 64); err != nil {
			return fmt.Errorf("%s: bucket %q: %v", m.url, le, err)
		}
		out = append(out, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no %s", m.url, renewalHistogram)
	}
	return out, nil
}

// lines fetches the Manager's metrics page and hands each line to f,
// stopping at the first error f returns.
func (m *managerMetrics) lines(ctx context.Context, f func(line string) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", m.url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if err := f(sc.Text()); err != nil {
			return err
		}
	}
	return sc.Err()
}

// bucket is one cumulative histogram bucket: n observations at or under
// le seconds (le < 0: +Inf).
type bucket struct{ le, n float64 }

// bucketQuantile returns the upper bound of the bucket that holds quantile
// q of the observations between before and after (cumulative counts of
// the same histogram), and how many there were; the bound is -1 when
// it is past the last finite bucket, 0 when nothing was observed.
func bucketQuantile(before, after []bucket, q float64) (le float64, n int) {
	if len(before) != len(after) || len(after) == 0 {
		return 0, 0
	}
	total := after[len(after)-1].n - before[len(before)-1].n
	if total <= 0 {
		return 0, 0
	}
	for i := range after {
		if after[i].n-before[i].n >= q*total {
			return after[i].le, int(total)
		}
	}
	return -1, int(total)
}

// fmtBucket formats bucketQuantile's bound.
func fmtBucket(le float64, n int) string {
	switch {
	case n == 0:
		return "—"
	case le < 0:
		return "> 10 s"
	}
	return "≤ " + (time.Duration(le * float64(time.Second))).String()
}
