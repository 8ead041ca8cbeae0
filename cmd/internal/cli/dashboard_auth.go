package cli

import (
	"html/template"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/certs"
)

// viewerCerts serves h to viewers with a certificate of the group (as
// certs.RequireHTTP does). A browser without one — a person, who cannot
// act on a TLS error — gets a page that says how to import one: the
// operator's certificate as a PKCS#12 file (leasehold cert export-p12).
// Programs get certs.RequireHTTP's one-line refusal.
func viewerCerts(src *certs.Source, h http.Handler) http.Handler {
	inner := certs.RequireHTTP(src, nil, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && strings.Contains(r.Header.Get("Accept"), "text/html") {
			if _, err := src.Verify(r.TLS.PeerCertificates); err != nil {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.WriteHeader(http.StatusUnauthorized)
				_ = noCertPage.Execute(w, struct{ Why, Dir string }{err.Error(), "$" + certs.DirEnv})
				return
			}
		}
		inner.ServeHTTP(w, r)
	})
}

var noCertPage = template.Must(template.New("nocert").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>leasehold dashboard: a certificate is needed</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:46em;margin:3em auto;padding:0 1em;color:#222}
code,pre{background:#f3f3f3;border-radius:3px;padding:.1em .3em}pre{padding:.6em}.why{color:#a33}</style></head>
<body id="no-certificate">
<h1>This dashboard needs your leasehold certificate</h1>
<p>It serves only viewers with a client certificate of its group's CA, and your browser presented
<span class="why">none it accepts: {{.Why}}</span>.</p>
<h2>Import the operator's certificate</h2>
<ol>
<li>Where the group's certificates are kept (<code>--certs-dir</code>, or {{.Dir}}), write yours as a
PKCS#12 file, the form browsers import:
<pre>leasehold cert create-operator alice --certs-dir certs      # if you have none yet
leasehold cert export-p12 operator.alice --certs-dir certs --password 'a phrase'</pre>
It writes <code>certs/operator.alice.p12</code>: your certificate, its key and the CA's certificate.
An operator's certificate may drain from this page; a lookup's (<code>lookup.NAME</code>) may only view.</li>
<li>Import the file. Chrome or Chromium: Settings → Privacy and security → Security → Manage
certificates → Your certificates → Import. Firefox: Settings → Privacy &amp; Security →
Certificates → View Certificates → Your Certificates → Import. Give the password you chose.</li>
<li>Restart the browser if it asked for no certificate before, reload this page, and choose the
certificate when the browser asks.</li>
</ol>
<p>docs/security.md describes the group's certificates and roles.</p>
</body></html>
`))
