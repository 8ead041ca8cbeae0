package chart

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The custom resources the chart renders, with the fields of their
// schemas (cert-manager.io/v1, monitoring.coreos.com/v1) that the chart
// uses: a field misspelt in a template fails the strict decode, as a
// field of the k8s.io/api types does.

// Certificate is cert-manager's Certificate.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec is the part of a Certificate's spec the chart sets.
type CertificateSpec struct {
	SecretName  string     `json:"secretName"`
	CommonName  string     `json:"commonName,omitempty"`
	Duration    string     `json:"duration,omitempty"`
	RenewBefore string     `json:"renewBefore,omitempty"`
	PrivateKey  PrivateKey `json:"privateKey"`
	Usages      []string   `json:"usages,omitempty"`
	URIs        []string   `json:"uris,omitempty"`
	DNSNames    []string   `json:"dnsNames,omitempty"`
	IPAddresses []string   `json:"ipAddresses,omitempty"`
	IssuerRef   IssuerRef  `json:"issuerRef"`
}

// PrivateKey is a Certificate's key's settings.
type PrivateKey struct {
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
	RotationPolicy string `json:"rotationPolicy,omitempty"`
}

// IssuerRef names the issuer of a Certificate.
type IssuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// Issuer is cert-manager's Issuer, of kind CA.
type Issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		CA struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

// SecretKey names a key of a Secret.
type SecretKey struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// ServiceMonitor is prometheus-operator's ServiceMonitor.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel  string               `json:"jobLabel,omitempty"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port      string `json:"port"`
			Path      string `json:"path,omitempty"`
			Interval  string `json:"interval,omitempty"`
			Scheme    string `json:"scheme,omitempty"`
			TLSConfig *struct {
				CA struct {
					Secret SecretKey `json:"secret"`
				} `json:"ca"`
				Cert struct {
					Secret SecretKey `json:"secret"`
				} `json:"cert"`
				KeySecret          SecretKey `json:"keySecret"`
				InsecureSkipVerify bool      `json:"insecureSkipVerify,omitempty"`
			} `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// PrometheusRule is prometheus-operator's PrometheusRule.
type PrometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}
