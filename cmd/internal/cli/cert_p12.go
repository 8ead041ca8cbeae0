package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	pkcs12 "software.sslmate.com/src/go-pkcs12"

	"github.com/leasehold/leasehold/certs"
)

// newExportP12Command is 'leasehold cert export-p12': a certificate and its
// key as one PKCS#12 file, the form browsers import, so that a person can
// open a dashboard served with certificates.
func newExportP12Command(e *env) *cobra.Command {
	var dir, out, password string
	cmd := &cobra.Command{
		Use:   "export-p12 NAME",
		Short: "Write certificate NAME (e.g. operator.alice) and its key as a PKCS#12 file a browser imports",
		Long: `Write the certificate NAME.crt of the certificates directory, its key NAME.key
and the CA's certificate as one PKCS#12 file (.p12), the form browsers import
a client certificate in: a person then opens a dashboard served with
certificates (leasehold dashboard --certs-dir), with an operator's to drain
from it, a lookup's to view only. The file holds the private key: it is
encrypted with --password (AES-256, PBKDF2), and written readable by its
owner alone.

Import it in Chrome or Chromium: Settings → Privacy and security → Security →
Manage certificates → Your certificates → Import; in Firefox: Settings →
Privacy & Security → Certificates → View Certificates → Your Certificates →
Import. Then reload the dashboard and pick the certificate when asked.`,
		Example: `  leasehold cert create-operator alice --certs-dir certs
  leasehold cert export-p12 operator.alice --certs-dir certs --password 'a phrase'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return fmt.Errorf("export-p12 takes one NAME argument (a certificate's file name without .crt, e.g. operator.alice), got %d", len(args))
			}
			return nil
		},
		RunE: run(func(_ context.Context, args []string) error {
			if dir == "" {
				return usagef("no certificates directory: pass --certs-dir DIR or set $%s", certs.DirEnv)
			}
			name := strings.TrimSuffix(args[0], ".crt")
			if out == "" {
				out = filepath.Join(dir, name+".p12")
			}
			path, err := exportP12(dir, name, out, password)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "wrote %s: %s, with its key and the CA's certificate; import it into the browser\n", path, name)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&dir, "certs-dir", e.getenv(certs.DirEnv), "the certificates `DIR`")
	f.StringVar(&out, "out", "", "the `FILE` to write (default: NAME.p12 in the certificates directory)")
	f.StringVar(&password, "password", "", "the password that encrypts the file, asked for by the browser on import (empty: no password, which some browsers refuse)")
	return cmd
}

// exportP12 writes dir/name.crt, its key and dir's CA as a PKCS#12 file.
func exportP12(dir, name, out, password string) (string, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		return "", fmt.Errorf("certificate %s in %s: %w (leasehold cert list names the certificates)", name, dir, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "", fmt.Errorf("certificate %s: %w", name, err)
	}
	ca, err := certs.ReadCertificates(filepath.Join(dir, certs.CAFile))
	if err != nil {
		return "", fmt.Errorf("the CA's certificate: %w", err)
	}
	b, err := pkcs12.Modern.Encode(pair.PrivateKey, leaf, ca, password)
	if err != nil {
		return "", fmt.Errorf("encoding %s as PKCS#12: %w", name, err)
	}
	if err := os.WriteFile(out, b, 0o600); err != nil {
		return "", err
	}
	return out, nil
}
