package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// The value sets the chart is checked with: its defaults, and each way
// of getting certificates, sizes and options.
var valueSets = map[string][]string{
	"defaults":            nil,
	"five":                {"manager.replicas=5,manager.foundingReplicas=5"},
	"scaled to five":      {"manager.replicas=5"},
	"leasehold cert":      {"certificates.source=leasehold,monitoring.serviceMonitor=true"},
	"plaintext, kv":       {"certificates.source=none,kvExample.enabled=true"},
	"everything":          {"kvExample.enabled=true,monitoring.serviceMonitor=true,monitoring.prometheusRule=true,manager.readReplicas=all,manager.namespaces={a,b}"},
	"an existing issuer":  {"certificates.certManager.issuerRef.name=corp-ca,certificates.certManager.issuerRef.kind=ClusterIssuer,kvExample.enabled=true"},
	"no gateway, no jobs": {"gateway.enabled=false,manager.addJobs=false"},
}

func render(t *testing.T, set ...string) *Objects {
	t.Helper()
	objs, err := Render(set...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestLint: helm lint passes with every value set, with no warning.
func TestLint(t *testing.T) {
	for name, set := range valueSets {
		vals, err := Values(set...)
		if err != nil {
			t.Fatal(err)
		}
		kv, _ := chartutil.ParseKubeVersion("v1.33.0")
		res := lint.AllWithKubeVersion(Dir(), vals, Namespace, kv)
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: %s", name, m)
			}
		}
	}
}

// TestRenderDecodesStrictly: every value set renders, and every object
// decodes into its type with no field unknown to it (Render fails
// otherwise); a field misspelt is caught.
func TestRenderDecodesStrictly(t *testing.T) {
	for name, set := range valueSets {
		objs, err := Render(set...)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(objs.StatefulSets) != 1 || len(objs.Services) < 2 || len(objs.PDBs) != 1 {
			t.Errorf("%s: %d StatefulSets, %d Services, %d PDBs", name, len(objs.StatefulSets), len(objs.Services), len(objs.PDBs))
		}
	}
	var o Objects
	if err := o.add("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIp: None}\n"); err == nil {
		t.Error("a misspelt field (clusterIp) decoded")
	}
	if err := o.add("apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: x}\nspec: {secretName: x, uri: [a]}\n"); err == nil {
		t.Error("a misspelt Certificate field (uri) decoded")
	}
}

// TestRefusesWhatCannotRun: values that could not found the group, or
// would leave a replica without a certificate, fail the render, saying so.
func TestRefusesWhatCannotRun(t *testing.T) {
	for set, want := range map[string]string{
		"manager.foundingReplicas=5":                           "foundingReplicas must be at most manager.replicas",
		"manager.replicas=7":                                   "certificates.maxReplicas",
		"kvExample.enabled=true,certificates.source=leasehold": "csi-driver",
	} {
		if _, err := Render(set); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", set, err, want)
		}
	}
}

func arg(args []string, flag string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func port(addr string) int32 {
	_, p, _ := strings.Cut(addr[strings.LastIndexByte(addr, ':'):], ":")
	n, _ := strconv.Atoi(p)
	return int32(n)
}

// TestReplicaIdentityIsStable: each pod's replica ID comes from its name
// (the ordinal plus one), which a StatefulSet keeps across restarts and
// reschedules; the founding replicas' --peers addresses are the pods'
// stable names under a headless Service that publishes them before they
// are ready; every pod advertises its own; its data directory is its own
// volume.
func TestReplicaIdentityIsStable(t *testing.T) {
	for name, set := range valueSets {
		objs := render(t, set...)
		sts := objs.StatefulSet(Release + "-manager")
		c := sts.Spec.Template.Spec.Containers[0]
		if _, ok := arg(c.Args, "--id"); ok {
			t.Errorf("%s: a fixed --id: every pod would be the same replica", name)
		}
		if v, _ := arg(c.Args, "--id-from-pod"); v != "$(POD_NAME)" || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		}) {
			t.Errorf("%s: the ID is not taken from the pod's name: --id-from-pod=%q", name, v)
		}
		if sts.Spec.PodManagementPolicy != "Parallel" {
			t.Errorf("%s: podManagementPolicy %q: the founding replicas must start together", name, sts.Spec.PodManagementPolicy)
		}
		headless := objs.Service(sts.Spec.ServiceName)
		if headless == nil || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
			t.Fatalf("%s: the StatefulSet's service %q is not headless, publishing addresses before readiness", name, sts.Spec.ServiceName)
		}
		domain := fmt.Sprintf("%s.%s.svc.cluster.local", sts.Spec.ServiceName, Namespace)
		lport := port(mustArg(t, c.Args, "--listen"))
		peers := strings.Split(mustArg(t, c.Args, "--peers"), ",")
		joined := strings.Join(set, ",")
		founding := min(int(*sts.Spec.Replicas), 3)
		if strings.Contains(joined, "foundingReplicas=5") {
			founding = 5
		}
		if len(peers) != founding {
			t.Errorf("%s: --peers lists %d replicas, want the %d founding ones", name, len(peers), founding)
		}
		for ord, p := range peers {
			want := fmt.Sprintf("%d=%s-%d.%s:%d", ord+1, sts.Name, ord, domain, lport)
			if p != want {
				t.Errorf("%s: --peers entry %d is %q, want %q", name, ord, p, want)
			}
		}
		if adv := mustArg(t, c.Args, "--advertise"); adv != fmt.Sprintf("$(POD_NAME).%s:%d", domain, lport) {
			t.Errorf("%s: --advertise %q is not the pod's stable name", name, adv)
		}
		if !slices.Contains(c.Args, "--join-unlisted") {
			t.Errorf("%s: replicas above the founding ones would not join", name)
		}
		dataDir := mustArg(t, c.Args, "--data-dir")
		if len(sts.Spec.VolumeClaimTemplates) != 1 || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == sts.Spec.VolumeClaimTemplates[0].Name && m.MountPath == dataDir
		}) {
			t.Errorf("%s: --data-dir %s is not the pod's own volume", name, dataDir)
		}
		// Every replica above the founding ones is added by a Job naming
		// the address it advertises.
		if !strings.Contains(joined, "addJobs=false") {
			for ord := founding; ord < int(*sts.Spec.Replicas); ord++ {
				want := []string{"cluster", "add", strconv.Itoa(ord + 1), fmt.Sprintf("%s-%d.%s:%d", sts.Name, ord, domain, lport)}
				if !slices.ContainsFunc(objs.Jobs, func(j batchv1.Job) bool { return slices.Equal(j.Spec.Template.Spec.Containers[0].Args[:4], want) }) {
					t.Errorf("%s: no Job runs %v", name, want)
				}
			}
		}
	}
}

func mustArg(t *testing.T, args []string, flag string) string {
	t.Helper()
	v, ok := arg(args, flag)
	if !ok {
		t.Fatalf("no %s in %v", flag, args)
	}
	return v
}

// TestDisruptionBudgetKeepsAQuorum: voluntary disruptions (a node drain)
// leave at least a quorum of the replicas, and allow one.
func TestDisruptionBudgetKeepsAQuorum(t *testing.T) {
	for _, n := range []int{1, 3, 4, 5} {
		objs := render(t, fmt.Sprintf("manager.replicas=%d,manager.foundingReplicas=%d", n, min(n, 3)))
		pdb := objs.PDBs[0]
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MaxUnavailable != nil {
			t.Fatalf("%d replicas: the budget must set minAvailable", n)
		}
		min := pdb.Spec.MinAvailable.IntValue()
		if quorum := n/2 + 1; min < quorum {
			t.Errorf("%d replicas: minAvailable %d is below a quorum, %d", n, min, quorum)
		}
		if n > 1 && min >= n {
			t.Errorf("%d replicas: minAvailable %d allows no drain at all", n, min)
		}
		sel := objs.StatefulSets[0].Spec.Template.Labels
		for k, v := range pdb.Spec.Selector.MatchLabels {
			if sel[k] != v {
				t.Errorf("%d replicas: the budget's selector %s=%s misses the replicas", n, k, v)
			}
		}
	}
}

// TestProbesPointAtRealEndpoints: readiness is /readyz and liveness
// /healthz, on the port the container serves them at (the manager's
// --metrics-listen, the gateway's --listen); the kv example, whose API
// asks every caller for a certificate, is probed on its listener.
func TestProbesPointAtRealEndpoints(t *testing.T) {
	for name, set := range valueSets {
		objs := render(t, set...)
		check := func(what string, c corev1.Container, flag string) {
			p := port(mustArg(t, c.Args, flag))
			portOf := func(h corev1.ProbeHandler) int32 {
				var ref string
				switch {
				case h.HTTPGet != nil:
					ref = h.HTTPGet.Port.String()
				case h.TCPSocket != nil:
					ref = h.TCPSocket.Port.String()
				default:
					t.Fatalf("%s: %s: a probe that is neither HTTP nor TCP", name, what)
				}
				for _, cp := range c.Ports {
					if cp.Name == ref || strconv.Itoa(int(cp.ContainerPort)) == ref {
						return cp.ContainerPort
					}
				}
				return -1
			}
			for kind, pr := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
				if pr == nil {
					t.Errorf("%s: %s has no %s probe", name, what, kind)
					continue
				}
				if got := portOf(pr.ProbeHandler); got != p {
					t.Errorf("%s: %s's %s probe asks port %d; it serves on %d (%s)", name, what, kind, got, p, flag)
				}
				if pr.HTTPGet != nil && pr.HTTPGet.Path != kind {
					t.Errorf("%s: %s's probe asks %s, want %s", name, what, pr.HTTPGet.Path, kind)
				}
				tls := !slices.Contains(c.Args, "--insecure")
				if pr.HTTPGet != nil && (pr.HTTPGet.Scheme == corev1.URISchemeHTTPS) != tls {
					t.Errorf("%s: %s's probe scheme %s, with TLS %v", name, what, pr.HTTPGet.Scheme, tls)
				}
			}
		}
		check("the manager", objs.StatefulSets[0].Spec.Template.Spec.Containers[0], "--metrics-listen")
		if d := objs.Deployment(Release + "-gateway"); d != nil {
			check("the gateway", d.Spec.Template.Spec.Containers[0], "--listen")
		}
		if d := objs.Deployment(Release + "-kv"); d != nil {
			c := d.Spec.Template.Spec.Containers[0]
			check("the kv example", c, "--listen")
			if c.ReadinessProbe.TCPSocket == nil {
				t.Errorf("%s: the kv example's probe asks its API, which refuses callers without a certificate", name)
			}
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
				t.Errorf("%s: the kv example has no preStop", name)
			}
			drain, _ := time.ParseDuration(mustArg(t, c.Args, "--drain-timeout"))
			if grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace <= drain {
				t.Errorf("%s: a grace period of %v does not cover the drain's %v", name, grace, drain)
			}
			if id := mustArg(t, c.Args, "--id"); id != "$(POD_NAME)" {
				t.Errorf("%s: the kv example's Owner ID is %q, not the pod's name", name, id)
			}
		}
	}
}

// TestAlertRulesAreDeployMonitorings: the chart carries
// deploy/monitoring/alerts.yml as it is.
func TestAlertRulesAreDeployMonitorings(t *testing.T) {
	a, err := os.ReadFile(filepath.Join(Dir(), "files", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(Dir(), "..", "..", "monitoring", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Error("deploy/helm/leasehold/files/alerts.yml differs from deploy/monitoring/alerts.yml: copy it over")
	}
	objs := render(t, "monitoring.prometheusRule=true")
	if len(objs.PrometheusRules) != 1 || len(objs.PrometheusRules[0].Spec.Groups) == 0 {
		t.Fatal("no PrometheusRule with the rules")
	}
	for _, g := range objs.PrometheusRules[0].Spec.Groups {
		for _, r := range g.Rules {
			if strings.Contains(r.Expr, `job="leasehold-manager"`) {
				return
			}
		}
	}
	t.Error("the rules do not select job=\"leasehold-manager\"")
}
