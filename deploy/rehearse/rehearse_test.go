package rehearse

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/deploy/chart"
	"github.com/leasehold/leasehold/deploy/image"
	"github.com/leasehold/leasehold/examples/kv/kv"
	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
	"github.com/leasehold/leasehold/protocol"
)

// values are the chart's values the rehearsal renders with: the fast
// timings (2-s leases, so that a lease lost would show within seconds),
// the kv example, certificates from cert-manager.
const values = "timings=fast,kvExample.enabled=true,kvExample.drainTimeout=20s,gateway.enabled=false,certificates.source=cert-manager"

const domain = chart.Namespace + ".svc.cluster.local"

// build builds the image's binaries for this machine.
func build(t *testing.T, dir string) map[string]string {
	bins := map[string]string{}
	for _, b := range image.Binaries {
		out := filepath.Join(dir, filepath.Base(b.Path))
		cmd := exec.Command("go", "build", "-o", out, b.Package)
		cmd.Dir = image.Root()
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.Package, err, o)
		}
		bins[b.Path] = out
	}
	return bins
}

// load is a kv client's traffic: each worker puts a key's next value and
// reads it back; a request that fails (its retries and timeout spent) or
// reads back anything else counts as failed.
type load struct {
	client      *kv.Client
	ops, failed atomic.Int64
	mu          sync.Mutex
	failures    []string
	maxLatency  time.Duration
	stop        chan struct{}
	wg          sync.WaitGroup
}

func (l *load) fail(format string, args ...any) {
	l.failed.Add(1)
	l.mu.Lock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
	l.mu.Unlock()
}

func (l *load) run(workers, keys int) {
	l.stop = make(chan struct{})
	for w := range workers {
		l.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("key-%d", (w*keys/workers+n)%keys)
				val := fmt.Sprintf("%d-%d", w, n)
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				err := l.client.Put(ctx, key, []byte(val))
				var got []byte
				if err == nil {
					got, err = l.client.Get(ctx, key)
				}
				cancel()
				l.ops.Add(2)
				switch {
				case err != nil:
					l.fail("%s: %v", key, err)
				case string(got) != val:
					l.fail("%s: read %q after writing %q", key, got, val)
				}
				l.mu.Lock()
				l.maxLatency = max(l.maxLatency, time.Since(start))
				l.mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// leasesLost sums leasehold_owner_leases_lost_total over the kv pods.
func leasesLost(t *testing.T, src *certs.Source, pods []*Pod, port string) float64 {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{mustPair(t, src)}}}}
	re := regexp.MustCompile(`(?m)^leasehold_owner_leases_lost_total\{[^}]*\} (\S+)$`)
	var sum float64
	for _, p := range pods {
		resp, err := cl.Get("https://" + p.IP + ":" + port + "/metrics")
		if err != nil {
			t.Fatalf("%s's metrics: %v", p.Name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := re.FindAllStringSubmatch(string(b), -1)
		if m == nil {
			t.Fatalf("%s's metrics have no leasehold_owner_leases_lost_total:\n%.500s", p.Name, b)
		}
		for _, x := range m {
			v, _ := strconv.ParseFloat(x[1], 64)
			sum += v
		}
	}
	return sum
}

func mustPair(t *testing.T, src *certs.Source) tls.Certificate {
	dir := src.Dir()
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, "lookup.rehearsal.crt"), filepath.Join(dir, "lookup.rehearsal.key"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRehearsal runs the chart's Manager StatefulSet (3 replicas) and kv
// Deployment (3 Owners) as processes, with a kv client's load, and does
// what Kubernetes does: a rolling restart of the StatefulSet in reverse
// ordinal order, each pod ready before the next; a pod deleted and
// rescheduled with its volume (after its rescheduling with an empty
// volume, a lost PVC, is refused); and a scale-up to 5, the new pods
// joining and the chart's add Jobs adding them. Planned steps: no request
// fails, no value and no lease is lost.
func TestRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("the rehearsal runs real processes for about a minute")
	}
	root := t.TempDir()
	c := &Cluster{Root: root, Bins: build(t, filepath.Join(root, "bin")), Entry: image.Entrypoint}
	cm, err := chart.NewCertManager()
	if err != nil {
		t.Fatal(err)
	}
	cm.Hosts = c.Lookup
	c.Certs = cm

	objs, err := chart.Render(values)
	if err != nil {
		t.Fatal(err)
	}
	objs5, err := chart.Render(values + ",manager.replicas=5")
	if err != nil {
		t.Fatal(err)
	}
	sts, sts5 := objs.StatefulSet(chart.Release+"-manager"), objs5.StatefulSet(chart.Release+"-manager")
	if !reflect.DeepEqual(sts.Spec.Template, sts5.Spec.Template) {
		t.Fatal("scaling to 5 changes the pod template: every replica would restart")
	}
	kvd := objs.Deployment(chart.Release + "-kv")

	// Names: each manager pod's stable name and the client Service; each
	// kv pod's name under its subdomain.
	mgr := make([]*Pod, 5)
	var mgrIPs []string
	for ord := range 5 {
		name := fmt.Sprintf("%s-%d", sts.Name, ord)
		ip := fmt.Sprintf("127.0.0.%d", 10+ord)
		c.Resolve(fmt.Sprintf("%s.%s.%s", name, sts.Spec.ServiceName, domain), ip)
		mgr[ord] = &Pod{Name: name, IP: ip, Spec: sts.Spec.Template.Spec, Claims: sts.Spec.VolumeClaimTemplates}
	}
	endpoints := func(n int) {
		mgrIPs = nil
		for ord := range n {
			mgrIPs = append(mgrIPs, mgr[ord].IP)
		}
		c.Endpoints(chart.Release+"-manager."+domain, mgrIPs...)
	}
	endpoints(3)
	var kvs []*Pod
	for i := range 3 {
		name := fmt.Sprintf("%s-5d8f7c9b4-%c%c%c%c%c", kvd.Name, 'a'+i, 'x', 'k'+i, 'q', 'z'-i)
		ip := fmt.Sprintf("127.0.0.%d", 30+i)
		c.Resolve(fmt.Sprintf("%s.%s.%s", name, kvd.Spec.Template.Spec.Subdomain, domain), ip)
		kvs = append(kvs, &Pod{Name: name, IP: ip, Spec: kvd.Spec.Template.Spec})
	}
	if err := cm.IssueAll(objs5); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range append(kvs, mgr...) {
			if p.cmd != nil {
				p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			for _, p := range append(kvs, mgr...) {
				if p.cmd != nil {
					t.Logf("%s:\n%s", p.Name, tail(p.Log(), 40))
				}
			}
		}
	})
	ctx := context.Background()
	ready := func(ps ...*Pod) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, len(ps))
		for i, p := range ps {
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				errs[i] = p.WaitReady(rctx)
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	start := func(ps ...*Pod) {
		t.Helper()
		for _, p := range ps {
			if err := c.Start(p); err != nil {
				t.Fatal(err)
			}
		}
		ready(ps...)
	}
	var figures []string
	step := func(name string, f func()) {
		t.Helper()
		failed0, ops0 := ld.failed.Load(), ld.ops.Load()
		began := time.Now()
		f()
		took := time.Since(began)
		fig := fmt.Sprintf("%-44s %6.1f s  %6d requests  %d failed", name, took.Seconds(), ld.ops.Load()-ops0, ld.failed.Load()-failed0)
		figures = append(figures, fig)
		t.Log(fig)
	}

	began := time.Now()
	start(mgr[:3]...)
	start(kvs...)
	t.Logf("3 replicas and 3 kv pods ready in %.1f s", time.Since(began).Seconds())

	// The load's client: a Lookup certificate of the group.
	clientDir := filepath.Join(root, "client")
	data, err := cm.Issue("lookup rehearsal", []string{"leasehold://lookup/rehearsal"}, nil, []string{"digital signature", "client auth", "server auth"})
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(clientDir, 0o700)
	os.WriteFile(filepath.Join(clientDir, "ca.crt"), data["ca.crt"], 0o600)
	os.WriteFile(filepath.Join(clientDir, "lookup.rehearsal.crt"), data["tls.crt"], 0o600)
	os.WriteFile(filepath.Join(clientDir, "lookup.rehearsal.key"), data["tls.key"], 0o600)
	src, err := certs.Open(clientDir, certs.Lookup, "rehearsal")
	if err != nil {
		t.Fatal(err)
	}
	var list []string
	for _, ip := range mgrIPs {
		list = append(list, ip+":7400")
	}
	client, err := kv.NewClient(ctx, kv.ClientConfig{Manager: strings.Join(list, ","), Timing: protocol.Fast(), CertsDir: clientDir, Timeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	for {
		if err := client.Put(wctx, "warm-up", []byte("1")); err == nil || wctx.Err() != nil {
			break
		}
	}
	cancel()
	ld = &load{client: client}
	ld.run(4, 200)

	step("warm-up under load", func() { time.Sleep(3 * time.Second) })

	step("rolling restart, ordinals 2, 1, 0", func() {
		for ord := 2; ord >= 0; ord-- {
			if code := mgr[ord].Stop(); code != 0 {
				t.Fatalf("%s exited %d on SIGTERM:\n%s", mgr[ord].Name, code, tail(mgr[ord].Log(), 20))
			}
			start(mgr[ord])
		}
	})

	// The pod rescheduled is a follower whose log the leader tracks: the
	// check of an empty volume sees what the leader has heard since it
	// took over (docs/deploy.md, "A lost volume"), so a replica that led
	// until it stopped would not be caught.
	moved := tracked(t, src, list)
	step(fmt.Sprintf("reschedule of pod %d with its volume", moved), func() {
		p := mgr[moved]
		if code := p.Stop(); code != 0 {
			t.Fatalf("%s exited %d on SIGTERM", p.Name, code)
		}
		// First with its volume lost: refused, saying how to re-add it.
		claim := filepath.Join(root, "pvc", "data-"+p.Name)
		os.Rename(claim, claim+".kept")
		if err := c.Start(p); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s started with an empty volume under the ID its group knows:\n%s", p.Name, tail(p.Log(), 20))
		}
		if code, _ := p.Exited(); code != 2 || !strings.Contains(p.Log(), "starts with an empty data directory") {
			t.Fatalf("%s with an empty volume: exit %d\n%s", p.Name, code, tail(p.Log(), 10))
		}
		os.RemoveAll(claim)
		os.Rename(claim+".kept", claim)
		start(p)
	})

	step("scale-up 3 → 5 (--join, the add Jobs)", func() {
		for _, p := range mgr[3:] {
			if err := c.Start(p); err != nil {
				t.Fatal(err)
			}
		}
		endpoints(5)
		for _, j := range objs5.Jobs {
			job := &Pod{Name: j.Name, IP: "127.0.0.99", Spec: j.Spec.Template.Spec}
			// restartPolicy OnFailure, backoffLimit: run it until it succeeds.
			for attempt := 0; ; attempt++ {
				if err := c.Start(job); err != nil {
					t.Fatal(err)
				}
				<-job.done
				if code, _ := job.Exited(); code == 0 {
					break
				}
				if attempt >= int(*j.Spec.BackoffLimit) {
					t.Fatalf("Job %s failed %d times:\n%s", j.Name, attempt+1, tail(job.Log(), 20))
				}
				time.Sleep(time.Second)
			}
		}
		ready(mgr[3:]...)
	})

	step("steady under load", func() { time.Sleep(3 * time.Second) })
	close(ld.stop)
	ld.wg.Wait()

	lost := leasesLost(t, src, kvs, "8080")
	st := client.Stats()
	t.Logf("%d requests (%d retries), %d failed, longest put+get %v, %v leases lost", ld.ops.Load(), st.Retries, ld.failed.Load(), ld.maxLatency.Round(time.Millisecond), lost)
	for _, f := range figures {
		t.Log(f)
	}
	if ld.failed.Load() > 0 {
		t.Errorf("%d requests failed on planned steps: %v", ld.failed.Load(), ld.failures)
	}
	if lost > 0 {
		t.Errorf("%v leases lost", lost)
	}
	// Every replica is a member, and every pod still runs.
	for _, p := range append(kvs, mgr...) {
		if code, ok := p.Exited(); ok {
			t.Errorf("%s exited (%d)", p.Name, code)
		}
	}
	out, err := exec.Command(c.Bins[image.Entrypoint], "cluster", "status", "--manager", strings.Join(list, ","), "--certs-dir", filepath.Join(root, "pods", objs5.Jobs[0].Name, "certs")).CombinedOutput()
	if err != nil || strings.Count(string(out), "follower") != 4 || strings.Count(string(out), "leader") < 1 {
		t.Errorf("cluster status after the scale-up: %v\n%s", err, out)
	}
}

var ld *load

// tracked returns the ordinal of a follower whose log the leader tracks,
// asking the replicas' status with the client's certificate.
func tracked(t *testing.T, src *certs.Source, addrs []string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, addr := range addrs {
			conn, err := grpc.NewClient(addr, certs.DialOption(src))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := pb.NewAdminClient(conn).Status(ctx, &pb.StatusRequest{})
			cancel()
			conn.Close()
			if c := resp.GetCluster(); err == nil && c.GetRole() == "leader" {
				for _, p := range c.GetPeers() {
					if p.GetId() != c.GetId() && p.GetMatch() > 0 {
						return int(p.GetId()) - 1
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no leader tracking a follower within 30 s")
	return -1
}
