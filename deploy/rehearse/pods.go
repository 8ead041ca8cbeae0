// Package rehearse runs what the chart describes as local processes, as
// Kubernetes would run the pods: the rendered StatefulSet's and
// Deployments' containers, with their arguments, environment (the
// downward API's pod name and IP), mounted volumes (a directory per
// volume, kept across restarts for a PersistentVolumeClaim, filled by a
// stand-in for cert-manager for the certificates) and probes, each pod on
// its own loopback address (127.0.0.x) with the cluster's DNS names mapped
// to those addresses. Its test does what Kubernetes does on a rolling
// restart, a reschedule and a scale-up, under load.
package rehearse

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/leasehold/leasehold/deploy/chart"
)

// Cluster is the stand-in for Kubernetes: where pods run, what names
// resolve to, the volumes and the certificates.
type Cluster struct {
	Root    string            // volumes, logs
	Bins    map[string]string // a path in the image → the binary built here
	Entry   string            // the image's entrypoint
	Certs   *chart.CertManager
	mu      sync.Mutex
	hosts   map[string]string   // DNS name → IP
	service map[string][]string // a Service's DNS name → its pods' IPs
}

// Resolve maps a DNS name to the IP a pod got.
func (c *Cluster) Resolve(dns, ip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hosts == nil {
		c.hosts = map[string]string{}
	}
	c.hosts[dns] = ip
}

// Endpoints sets the pods behind a Service's name.
func (c *Cluster) Endpoints(dns string, ips ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.service == nil {
		c.service = map[string][]string{}
	}
	c.service[dns] = ips
}

// Lookup returns the IPs a DNS name resolves to (for the certificates).
func (c *Cluster) Lookup(dns string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ip, ok := c.hosts[dns]; ok {
		return []string{ip}
	}
	return nil
}

// Pod is one running (or stopped) pod.
type Pod struct {
	Name, IP string
	Spec     corev1.PodSpec
	Claims   []corev1.PersistentVolumeClaim // a StatefulSet's volumeClaimTemplates

	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// argv is the container's command line as this machine runs it: $(VAR)
// expanded, mount paths made local, the wildcard listen address made the
// pod's own, and DNS names resolved.
func (c *Cluster) argv(p *Pod, mounts map[string]string) ([]string, []string, error) {
	ct := p.Spec.Containers[0]
	env := map[string]string{}
	var envList []string
	for _, e := range ct.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil && f.FieldRef != nil {
			switch f.FieldRef.FieldPath {
			case "metadata.name":
				v = p.Name
			case "status.podIP":
				v = p.IP
			default:
				return nil, nil, fmt.Errorf("%s: env %s from %s", p.Name, e.Name, f.FieldRef.FieldPath)
			}
		}
		env[e.Name] = v
		envList = append(envList, e.Name+"="+v)
	}
	cmd := ct.Command
	if len(cmd) == 0 {
		cmd = []string{c.Entry}
	}
	bin, ok := c.Bins[cmd[0]]
	if !ok {
		return nil, nil, fmt.Errorf("%s: no binary for %s", p.Name, cmd[0])
	}
	paths := make([]string, 0, len(mounts))
	for m := range mounts {
		paths = append(paths, m)
	}
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	c.mu.Lock()
	defer c.mu.Unlock()
	hosts := make([]string, 0, len(c.hosts))
	for h := range c.hosts {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(i, j int) bool { return len(hosts[i]) > len(hosts[j]) })
	out := []string{bin}
	for _, a := range append(cmd[1:], ct.Args...) {
		a = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
		for _, m := range paths {
			a = strings.ReplaceAll(a, m, mounts[m])
		}
		a = strings.ReplaceAll(a, "0.0.0.0:", p.IP+":")
		for svc, ips := range c.service {
			a = regexp.MustCompile(regexp.QuoteMeta(svc)+`:(\d+)`).ReplaceAllStringFunc(a, func(s string) string {
				port := s[strings.LastIndexByte(s, ':')+1:]
				var list []string
				for _, ip := range ips {
					list = append(list, ip+":"+port)
				}
				return strings.Join(list, ",")
			})
		}
		for _, h := range hosts {
			a = strings.ReplaceAll(a, h, c.hosts[h])
		}
		out = append(out, a)
	}
	return out, envList, nil
}

// Start runs the pod: its volumes made (a claim's directory kept from an
// earlier run), its certificates issued, its process started.
func (c *Cluster) Start(p *Pod) error {
	ct := p.Spec.Containers[0]
	mounts := map[string]string{}
	for _, vm := range ct.VolumeMounts {
		var dir string
		if i := indexClaim(p.Claims, vm.Name); i >= 0 {
			dir = filepath.Join(c.Root, "pvc", vm.Name+"-"+p.Name)
		} else {
			dir = filepath.Join(c.Root, "pods", p.Name, vm.Name)
			os.RemoveAll(dir) // a new pod's volumes are new
			v := volume(p.Spec, vm.Name)
			if v == nil {
				return fmt.Errorf("%s: no volume %s", p.Name, vm.Name)
			}
			if v.EmptyDir == nil {
				if err := c.Certs.Fill(dir, *v, p.Name); err != nil {
					return err
				}
			}
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		mounts[vm.MountPath] = dir
	}
	args, env, err := c.argv(p, mounts)
	if err != nil {
		return err
	}
	p.log = filepath.Join(c.Root, "logs", p.Name+".log")
	os.MkdirAll(filepath.Dir(p.log), 0o755)
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return err
	}
	p.done = make(chan struct{})
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return nil
}

// cleanEnv is this process's environment without leasehold's variables,
// which a pod would not have.
func cleanEnv() []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "LEASEHOLD_") {
			out = append(out, e)
		}
	}
	return out
}

func indexClaim(cs []corev1.PersistentVolumeClaim, name string) int {
	for i, c := range cs {
		if c.Name == name {
			return i
		}
	}
	return -1
}

func volume(s corev1.PodSpec, name string) *corev1.Volume {
	for i := range s.Volumes {
		if s.Volumes[i].Name == name {
			return &s.Volumes[i]
		}
	}
	return nil
}

// Exited reports whether the process has ended, and its exit code.
func (p *Pod) Exited() (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	default:
		return 0, false
	}
}

// Log returns the pod's log so far.
func (p *Pod) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// Stop deletes the pod as the kubelet does: the preStop hook, SIGTERM,
// and SIGKILL once the grace period has passed. It returns the exit code.
func (p *Pod) Stop() int {
	if _, ok := p.Exited(); ok {
		return p.cmd.ProcessState.ExitCode()
	}
	grace := 30 * time.Second
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	deadline := time.Now().Add(grace)
	if l := p.Spec.Containers[0].Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
		time.Sleep(time.Duration(l.PreStop.Sleep.Seconds) * time.Second)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Until(deadline)):
		p.cmd.Process.Kill()
		<-p.done
	}
	return p.cmd.ProcessState.ExitCode()
}

// Probe runs a probe once, as the kubelet does: an HTTP GET (HTTPS
// without verifying the certificate) answered 200–399, or a TCP connect.
func (p *Pod) Probe(pr *corev1.Probe) error {
	ct := p.Spec.Containers[0]
	port := func(name string) string {
		for _, cp := range ct.Ports {
			if cp.Name == name {
				return fmt.Sprint(cp.ContainerPort)
			}
		}
		return name
	}
	switch {
	case pr.HTTPGet != nil:
		scheme := strings.ToLower(string(pr.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		cl := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		defer cl.CloseIdleConnections()
		resp, err := cl.Get(scheme + "://" + net.JoinHostPort(p.IP, port(pr.HTTPGet.Port.String())) + pr.HTTPGet.Path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("%s: %s", pr.HTTPGet.Path, resp.Status)
		}
		return nil
	case pr.TCPSocket != nil:
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(p.IP, port(pr.TCPSocket.Port.String())), time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return fmt.Errorf("a probe of no kind this rehearsal runs")
}

// WaitReady polls the readiness probe at its period until it passes,
// the process exits, or ctx ends.
func (p *Pod) WaitReady(ctx context.Context) error {
	pr := p.Spec.Containers[0].ReadinessProbe
	period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
	for {
		if code, ok := p.Exited(); ok {
			return fmt.Errorf("%s exited (%d) before it was ready:\n%s", p.Name, code, tail(p.Log(), 30))
		}
		err := p.Probe(pr)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v\n%s", p.Name, err, tail(p.Log(), 30))
		case <-time.After(period):
		case <-p.done:
		}
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
