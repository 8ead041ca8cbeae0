// Package chart renders the Helm chart in deploy/helm/leasehold with the
// helm library, as helm template does, and decodes every object it renders
// strictly (a field the type does not have fails) into the k8s.io/api
// types, or, for the custom resources (cert-manager's Certificate and
// Issuer, prometheus-operator's ServiceMonitor and PrometheusRule), into
// the types of this package, which carry the fields of those resources the
// chart uses. Its tests check the chart's invariants; the rehearsal
// (deploy/rehearse) runs what it renders.
package chart

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Dir is the chart's directory.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "helm", "leasehold")
}

// Release is the release name and namespace the tests render with.
const (
	Release   = "leasehold"
	Namespace = "leases"
)

// Objects are what the chart renders, by kind.
type Objects struct {
	StatefulSets    []appsv1.StatefulSet
	Deployments     []appsv1.Deployment
	Services        []corev1.Service
	PDBs            []policyv1.PodDisruptionBudget
	Jobs            []batchv1.Job
	Certificates    []Certificate
	Issuers         []Issuer
	ServiceMonitors []ServiceMonitor
	PrometheusRules []PrometheusRule
}

// Values parses helm's --set syntax ("a.b=1,c=x") into values.
func Values(set ...string) (map[string]any, error) {
	vals := map[string]any{}
	for _, s := range set {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

// Render renders the chart with the values given over its defaults, as
// helm template --set does, and decodes each object strictly.
func Render(set ...string) (*Objects, error) {
	ch, err := loader.Load(Dir())
	if err != nil {
		return nil, err
	}
	vals, err := Values(set...)
	if err != nil {
		return nil, err
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: Release, Namespace: Namespace, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	objs := &Objects{}
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for i, doc := range strings.Split(files[name], "\n---") {
			if err := objs.add(doc); err != nil {
				return nil, fmt.Errorf("%s, document %d: %w\n%s", name, i, err, doc)
			}
		}
	}
	return objs, nil
}

// add decodes one YAML document strictly by its kind.
func (o *Objects) add(doc string) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return err
	}
	if tm.Kind == "" {
		if strings.TrimSpace(stripComments(doc)) != "" {
			return fmt.Errorf("an object without a kind")
		}
		return nil
	}
	var err error
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 StatefulSet":
		o.StatefulSets, err = decode(doc, o.StatefulSets)
	case "apps/v1 Deployment":
		o.Deployments, err = decode(doc, o.Deployments)
	case "v1 Service":
		o.Services, err = decode(doc, o.Services)
	case "policy/v1 PodDisruptionBudget":
		o.PDBs, err = decode(doc, o.PDBs)
	case "batch/v1 Job":
		o.Jobs, err = decode(doc, o.Jobs)
	case "cert-manager.io/v1 Certificate":
		o.Certificates, err = decode(doc, o.Certificates)
	case "cert-manager.io/v1 Issuer":
		o.Issuers, err = decode(doc, o.Issuers)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o.ServiceMonitors, err = decode(doc, o.ServiceMonitors)
	case "monitoring.coreos.com/v1 PrometheusRule":
		o.PrometheusRules, err = decode(doc, o.PrometheusRules)
	default:
		return fmt.Errorf("unexpected %s %s", tm.APIVersion, tm.Kind)
	}
	return err
}

// decode decodes doc into a T as the API server does: field names match
// case-sensitively, and an unknown or duplicate field is an error.
func decode[T any](doc string, to []T) ([]T, error) {
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		return to, err
	}
	var v T
	strict, err := sigsjson.UnmarshalStrict(j, &v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return to, err
	}
	if len(strict) > 0 {
		return to, errors.Join(strict...)
	}
	return append(to, v), nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// StatefulSet returns the rendered StatefulSet of the given name.
func (o *Objects) StatefulSet(name string) *appsv1.StatefulSet {
	for i := range o.StatefulSets {
		if o.StatefulSets[i].Name == name {
			return &o.StatefulSets[i]
		}
	}
	return nil
}

// Deployment returns the rendered Deployment of the given name.
func (o *Objects) Deployment(name string) *appsv1.Deployment {
	for i := range o.Deployments {
		if o.Deployments[i].Name == name {
			return &o.Deployments[i]
		}
	}
	return nil
}

// Service returns the rendered Service of the given name.
func (o *Objects) Service(name string) *corev1.Service {
	for i := range o.Services {
		if o.Services[i].Name == name {
			return &o.Services[i]
		}
	}
	return nil
}

// Certificate returns the Certificate whose Secret is secretName.
func (o *Objects) Certificate(secretName string) *Certificate {
	for i := range o.Certificates {
		if o.Certificates[i].Spec.SecretName == secretName {
			return &o.Certificates[i]
		}
	}
	return nil
}
