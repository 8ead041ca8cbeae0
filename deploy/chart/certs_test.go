package chart

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/leasehold/leasehold/certs"
)

// podCerts fills a pod's --certs-dir as the kubelet would, from what
// cert-manager issues for the chart's requests, and opens it as the
// process would (certs.Open, which checks the identity's rules and the
// CA's signature).
func podCerts(t *testing.T, m *CertManager, spec corev1.PodSpec, pod string, role certs.Role, name string) *certs.Source {
	t.Helper()
	c := spec.Containers[0]
	dir := mustArg(t, c.Args, "--certs-dir")
	var vol string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == dir {
			vol = vm.Name
		}
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
	if i < 0 {
		t.Fatalf("%s: --certs-dir %s is no volume's mount", pod, dir)
	}
	local := filepath.Join(t.TempDir(), strings.TrimPrefix(dir, "/"))
	if err := m.Fill(local, spec.Volumes[i], pod); err != nil {
		t.Fatalf("%s: %v", pod, err)
	}
	src, err := certs.Open(local, role, name)
	if err != nil {
		t.Fatalf("%s (%s %q): %v", pod, role, name, err)
	}
	return src
}

func hostsOf(t *testing.T, dir string, base string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, base))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCertManagerCertificatesFitTheIdentityRules: with certificates from
// cert-manager, every listener has a certificate (every container with
// --certs-dir mounts a volume there), and what the chart asks cert-manager
// for is what leasehold accepts: each replica's certificate carries
// leasehold://replica/<its ID> and the host names it is dialled at (its
// stable name, the client Service's), the add Jobs' an operator's, the
// gateway's a lookup's, and each kv pod's an Owner's named after the pod,
// in its namespace. The certificates are issued from the rendered
// requests, written as the volumes map them, and opened with certs.Open
// as the processes open them.
func TestCertManagerCertificatesFitTheIdentityRules(t *testing.T) {
	for _, name := range []string{"defaults", "everything", "five", "scaled to five", "an existing issuer"} {
		objs := render(t, valueSets[name]...)
		m, err := NewCertManager()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.IssueAll(objs); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range objs.Certificates {
			for _, u := range c.Spec.URIs {
				if !strings.HasPrefix(u, certs.Scheme+"://") {
					t.Errorf("%s: Certificate %s asks for the URI %q, no leasehold identity", name, c.Name, u)
				}
			}
			if c.Spec.PrivateKey.Algorithm != "ECDSA" || !slices.Contains(c.Spec.Usages, "client auth") || !slices.Contains(c.Spec.Usages, "server auth") {
				t.Errorf("%s: Certificate %s: key %+v, usages %v; every leasehold certificate serves both ends", name, c.Name, c.Spec.PrivateKey, c.Spec.Usages)
			}
			if (c.Spec.IssuerRef.Name == "corp-ca") != (name == "an existing issuer") {
				t.Errorf("%s: Certificate %s is issued by %+v", name, c.Name, c.Spec.IssuerRef)
			}
		}
		if (len(objs.Issuers) == 0) != (name == "an existing issuer") {
			t.Errorf("%s: %d Issuers", name, len(objs.Issuers))
		}

		sts := objs.StatefulSet(Release + "-manager")
		client := fmt.Sprintf("%s-manager.%s.svc.cluster.local", Release, Namespace) // every client's --manager
		for ord := range int(*sts.Spec.Replicas) {
			pod := fmt.Sprintf("%s-%d", sts.Name, ord)
			src := podCerts(t, m, sts.Spec.Template.Spec, pod, certs.Replica, strconv.Itoa(ord+1))
			if id, err := src.Identity().ReplicaID(); err != nil || id != uint64(ord+1) {
				t.Errorf("%s: pod %s presents %s", name, pod, src.Identity())
			}
			adv := strings.ReplaceAll(mustArg(t, sts.Spec.Template.Spec.Containers[0].Args, "--advertise"), "$(POD_NAME)", pod)
			leaf := hostsOf(t, src.Dir(), fmt.Sprintf("replica.%d.crt", ord+1))
			for _, host := range []string{strings.Split(adv, ":")[0], client} {
				if err := leaf.VerifyHostname(host); err != nil {
					t.Errorf("%s: replica %d's certificate does not serve %s, where it is dialled: %v", name, ord+1, host, err)
				}
			}
		}
		for _, j := range objs.Jobs {
			src := podCerts(t, m, j.Spec.Template.Spec, j.Name, certs.Operator, "")
			if src.Identity().Role != certs.Operator {
				t.Errorf("%s: Job %s runs as %s", name, j.Name, src.Identity())
			}
		}
		if d := objs.Deployment(Release + "-gateway"); d != nil {
			podCerts(t, m, d.Spec.Template.Spec, d.Name+"-6b7c9-abcde", certs.Lookup, "")
		}
		if d := objs.Deployment(Release + "-kv"); d != nil {
			pod := d.Name + "-5d8f7c9b4-x2x4z"
			src := podCerts(t, m, d.Spec.Template.Spec, pod, certs.Owner, pod)
			ns := mustArg(t, d.Spec.Template.Spec.Containers[0].Args, "--namespace")
			if id := src.Identity(); id.Name != pod || !id.MayUse(ns) {
				t.Errorf("%s: the kv pod %s presents %s, for namespace %s", name, pod, id, ns)
			}
			adv := strings.ReplaceAll(mustArg(t, d.Spec.Template.Spec.Containers[0].Args, "--advertise"), "$(POD_NAME)", pod)
			if err := hostsOf(t, src.Dir(), "owner.pod.crt").VerifyHostname(strings.Split(adv, ":")[0]); err != nil {
				t.Errorf("%s: the kv pod's certificate does not serve its advertised %s: %v", name, adv, err)
			}
		}
		for _, sm := range objs.ServiceMonitors {
			for _, e := range sm.Spec.Endpoints {
				if e.TLSConfig == nil || m.Secrets[e.TLSConfig.Cert.Secret.Name] == nil {
					t.Errorf("%s: the ServiceMonitor scrapes without a certificate of the group", name)
				}
			}
		}
	}
}

// TestEveryListenerHasACertificate: with certificates (from cert-manager
// or leasehold cert), no container runs --insecure, and each mounts a
// volume at its --certs-dir; plaintext is chosen only by
// certificates.source=none.
func TestEveryListenerHasACertificate(t *testing.T) {
	for name, set := range valueSets {
		objs := render(t, set...)
		plain := strings.Contains(strings.Join(set, ","), "source=none")
		var specs []corev1.PodSpec
		for _, s := range objs.StatefulSets {
			specs = append(specs, s.Spec.Template.Spec)
		}
		for _, d := range objs.Deployments {
			specs = append(specs, d.Spec.Template.Spec)
		}
		for _, j := range objs.Jobs {
			specs = append(specs, j.Spec.Template.Spec)
		}
		for _, s := range specs {
			c := s.Containers[0]
			dir, tls := arg(c.Args, "--certs-dir")
			if slices.Contains(c.Args, "--insecure") != plain || tls == plain {
				t.Errorf("%s: %s runs %v", name, c.Name, c.Args)
				continue
			}
			if tls && !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir && m.ReadOnly }) {
				t.Errorf("%s: %s's --certs-dir %s is no read-only mount", name, c.Name, dir)
			}
			if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: %s may run as root or write its root filesystem", name, c.Name)
			}
		}
	}
}
