package chart

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/leasehold/leasehold/certs"
)

// CertManager stands in for cert-manager with a CA issuer: it issues what
// the chart's Certificate resources and csi-driver volumes ask for, signed
// by a CA of its own, into Secrets of tls.crt, tls.key and ca.crt, and
// fills a pod's volumes from them as the kubelet would. The tests check
// what it issues against the certs package's rules; the rehearsal runs
// the processes with it.
type CertManager struct {
	CA    *certs.CA
	caPEM []byte
	// Hosts, if set, gives the addresses a DNS name resolves to, added to
	// the certificate's IP SANs (the rehearsal's loopback addresses).
	Hosts   func(dns string) []string
	Secrets map[string]map[string][]byte
}

// NewCertManager makes a CA.
func NewCertManager() (*CertManager, error) {
	ca, err := certs.NewCA("leasehold chart CA", time.Now(), 0)
	if err != nil {
		return nil, err
	}
	return &CertManager{CA: ca, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), Secrets: map[string]map[string][]byte{}}, nil
}

// Issue signs a certificate with the SANs and usages given, as cert-manager
// does for a Certificate's spec, and returns the Secret's data.
func (m *CertManager) Issue(cn string, uris, dnsNames, usages []string) (map[string][]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     dnsNames,
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("URI SAN %q: %w", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	for _, u := range usages {
		switch u {
		case "digital signature":
			tmpl.KeyUsage |= x509.KeyUsageDigitalSignature
		case "key encipherment":
			tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
		case "server auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		case "client auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		default:
			return nil, fmt.Errorf("usage %q is none of cert-manager's that the chart uses", u)
		}
	}
	if m.Hosts != nil {
		for _, d := range dnsNames {
			for _, h := range m.Hosts(d) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(h))
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, m.CA.Cert, &key.PublicKey, m.CA.Key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		"ca.crt":  m.caPEM,
	}, nil
}

// IssueAll issues every Certificate the chart renders into its Secret.
func (m *CertManager) IssueAll(objs *Objects) error {
	for _, c := range objs.Certificates {
		data, err := m.Issue(c.Spec.CommonName, c.Spec.URIs, c.Spec.DNSNames, c.Spec.Usages)
		if err != nil {
			return fmt.Errorf("Certificate %s: %w", c.Name, err)
		}
		m.Secrets[c.Spec.SecretName] = data
	}
	return nil
}

// csiDriver is cert-manager's csi-driver, which issues a certificate per
// pod when the pod starts.
const csiDriver = "csi.cert-manager.io"

// Fill writes into dir what volume v holds in the pod named pod: the
// Secrets' keys (as its items map them), or the certificate the
// csi-driver issues, with ${POD_NAME} replaced by the pod's name.
func (m *CertManager) Fill(dir string, v corev1.Volume, pod string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	secret := func(name string, items []corev1.KeyToPath) error {
		data, ok := m.Secrets[name]
		if !ok {
			return fmt.Errorf("volume %s: no Certificate makes the Secret %s", v.Name, name)
		}
		if len(items) == 0 {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				return fmt.Errorf("volume %s: the Secret %s has no key %s", v.Name, name, it.Key)
			}
			if err := os.WriteFile(filepath.Join(dir, it.Path), b, 0o600); err != nil {
				return err
			}
		}
		return nil
	}
	switch {
	case v.Secret != nil:
		return secret(v.Secret.SecretName, v.Secret.Items)
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			if src.Secret == nil {
				return fmt.Errorf("volume %s: a projected source other than a Secret", v.Name)
			}
			if err := secret(src.Secret.Name, src.Secret.Items); err != nil {
				return err
			}
		}
		return nil
	case v.CSI != nil && v.CSI.Driver == csiDriver:
		a := map[string]string{}
		for k, val := range v.CSI.VolumeAttributes {
			a[strings.TrimPrefix(k, csiDriver+"/")] = strings.ReplaceAll(val, "${POD_NAME}", pod)
		}
		data, err := m.Issue(a["common-name"], split(a["uri-sans"]), split(a["dns-names"]), split(a["key-usages"]))
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		for key, attr := range map[string]string{"tls.crt": "certificate-file", "tls.key": "privatekey-file", "ca.crt": "ca-file"} {
			name := a[attr]
			if name == "" {
				name = key
			}
			if err := os.WriteFile(filepath.Join(dir, name), data[key], 0o600); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("volume %s: a kind the chart does not use for certificates", v.Name)
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
