package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names in a certificates directory. A directory holds the CA's
// certificate (CAFile; it may hold several, old and new, while the CA is
// rotated), optionally the CA's key (CAKeyFile: keep it off the machines
// that run leasehold), and any number of certificate and key pairs named
// after the identity: replica.1.crt and replica.1.key, owner.kv-1.crt,
// lookup.frontend.crt, operator.alice.crt.
const (
	CAFile    = "ca.crt"
	CAKeyFile = "ca.key"
)

// DirEnv is the environment variable that names the certificates
// directory when no --certs-dir is given.
const DirEnv = "LEASEHOLD_CERTS_DIR"

// Default lifetimes of what Create and NewCA make.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultCertLifetime = 365 * 24 * time.Hour
)

// FileBase is the file name, without extension, of id's certificate and
// key in a certificates directory: "owner.kv-1". The name is kept to what a
// Kubernetes Secret's key may hold (letters, digits, '-' and '.'), so a
// directory can be a Secret mounted as it is: any other byte, '_' included,
// is written _XX in hex ("owner.127.0.0.1_3a8001" for the Owner
// "127.0.0.1:8001"), which keeps two names from sharing a file. Open also
// reads the names written before (OldFileBase).
func FileBase(id Identity) string { return string(id.Role) + "." + fileSafe(id.Name) }

func fileSafe(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02x", c)
	}
	return b.String()
}

// OldFileBase is the file name leasehold gave id's certificate before
// FileBase kept to a Secret's key: the name as it is, with '/', '\', NUL
// and a leading '.' replaced by '_' ("owner.127.0.0.1:8001").
func OldFileBase(id Identity) string {
	b := []byte(id.Name)
	for i, c := range b {
		if c == '/' || c == '\\' || c == 0 || (i == 0 && c == '.') {
			b[i] = '_'
		}
	}
	return string(id.Role) + "." + string(b)
}

// CA is a certificate authority: the certificate every member of a group
// trusts, and its key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA valid from now for lifetime (0: 10 years).
func NewCA(name string, now time.Time, lifetime time.Duration) (*CA, error) {
	if lifetime == 0 {
		lifetime = DefaultCALifetime
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"leasehold"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: c, Key: key}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// Issue makes a certificate for id, valid from now for lifetime (0: one
// year), for the hosts (DNS names or IP addresses) it serves at; it is
// good for both ends of a connection. It returns the certificate and key
// in PEM.
func (ca *CA) Issue(id Identity, hosts []string, now time.Time, lifetime time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := id.Validate(); err != nil {
		return nil, nil, err
	}
	if lifetime == 0 {
		lifetime = DefaultCertLifetime
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: string(id.Role) + " " + id.Name, Organization: []string{"leasehold"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         id.URIs(),
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	for _, h := range hosts {
		if h == "" {
			return nil, nil, errors.New("certs: an empty host name")
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// PEM returns the CA's certificate and key in PEM.
func (ca *CA) PEM() (certPEM, keyPEM []byte, err error) {
	kder, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// CreateCA makes a CA and writes it into dir (created if need be) as
// ca.crt and the key as keyFile (empty: dir/ca.key). It refuses to replace
// an existing CA unless overwrite.
func CreateCA(dir, keyFile string, lifetime time.Duration, overwrite bool) (*CA, error) {
	if keyFile == "" {
		keyFile = filepath.Join(dir, CAKeyFile)
	}
	// The name tells one group's CA from another's in errors.
	ca, err := NewCA("leasehold CA "+time.Now().UTC().Format(time.RFC3339), time.Now(), lifetime)
	if err != nil {
		return nil, err
	}
	c, k, err := ca.PEM()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := writeFile(keyFile, k, 0o600, overwrite); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, CAFile), c, 0o644, overwrite); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA reads a CA from its certificate and key files. When the
// certificate file holds several certificates (a CA being rotated), the
// one that matches the key is used.
func LoadCA(certFile, keyFile string) (*CA, error) {
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: the CA key: %w (create one with leasehold cert create-ca)", err)
	}
	blk, _ := pem.Decode(kb)
	if blk == nil {
		return nil, fmt.Errorf("certs: %s holds no PEM key", keyFile)
	}
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", keyFile, err)
	}
	cs, err := readCerts(certFile)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if pk, ok := c.PublicKey.(*ecdsa.PublicKey); ok && pk.Equal(&key.PublicKey) {
			return &CA{Cert: c, Key: key}, nil
		}
	}
	return nil, fmt.Errorf("certs: no certificate in %s matches the key in %s", certFile, keyFile)
}

// Create issues a certificate for id with ca and writes it into dir as
// FileBase(id).crt and .key, replacing any there (which is how a
// certificate is rotated: running processes load it on their next
// reload). It returns the certificate's path.
func Create(dir string, ca *CA, id Identity, hosts []string, lifetime time.Duration) (string, error) {
	c, k, err := ca.Issue(id, hosts, time.Now(), lifetime)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	base := filepath.Join(dir, FileBase(id))
	// The key first: a reload that sees the new certificate must find its key.
	if err := writeFile(base+".key", k, 0o600, true); err != nil {
		return "", err
	}
	if err := writeFile(base+".crt", c, 0o644, true); err != nil {
		return "", err
	}
	return base + ".crt", nil
}

// writeFile writes b to path atomically (a temporary file renamed over
// it), so a process reloading never reads half a file.
func writeFile(path string, b []byte, perm os.FileMode, overwrite bool) error {
	if !overwrite {
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("certs: %s exists (pass --overwrite to replace it)", path)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readCerts reads every certificate in a PEM file.
func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certs: %s: %w", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("certs: %s holds no certificate", path)
	}
	return out, nil
}

// ReadCertificates reads every certificate in a PEM file.
func ReadCertificates(path string) ([]*x509.Certificate, error) { return readCerts(path) }
