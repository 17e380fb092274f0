// Package check decodes every object of rendered Kubernetes manifests
// strictly into the Kubernetes API types: an unknown or misspelt field, a
// duplicate field or a wrong type fails the test, as it would fail
// `kubectl apply --validate=strict`.
//
//	MANIFESTS=a.yaml,b.yaml go test ./...
//
// Without MANIFESTS it checks ../kubernetes/*.yaml.
package check

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart uses; a CRD has no type in
// k8s.io/api, so its fields are listed here, decoded just as strictly.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule is the part of the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1) the chart uses, decoded just as strictly.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func decoder(t *testing.T) runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

func files(t *testing.T) []string {
	if env := os.Getenv("MANIFESTS"); env != "" {
		return strings.Split(env, ",")
	}
	found, err := filepath.Glob("../kubernetes/*.yaml")
	if err != nil || len(found) == 0 {
		t.Fatalf("no manifests in ../kubernetes (%v)", err)
	}
	return found
}

// documents splits a multi-document YAML stream, dropping empty ones.
func documents(data []byte) [][]byte {
	var docs [][]byte
	for _, part := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		trimmed := bytes.TrimSpace(part)
		empty := true
		for _, line := range bytes.Split(trimmed, []byte("\n")) {
			l := bytes.TrimSpace(line)
			if len(l) > 0 && l[0] != '#' {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, part)
		}
	}
	return docs
}

func TestManifestsDecodeStrictly(t *testing.T) {
	dec := decoder(t)
	kinds := map[string]int{}
	for _, file := range files(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range documents(data) {
			where := fmt.Sprintf("%s: document %d", file, i+1)
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if head.APIVersion == "monitoring.coreos.com/v1" && head.Kind == "ServiceMonitor" {
				var sm serviceMonitor
				if err := yaml.UnmarshalStrict(doc, &sm); err != nil {
					t.Errorf("%s: ServiceMonitor: %v", where, err)
				}
				kinds[head.Kind]++
				continue
			}
			if head.APIVersion == "monitoring.coreos.com/v1" && head.Kind == "PrometheusRule" {
				var pr prometheusRule
				if err := yaml.UnmarshalStrict(doc, &pr); err != nil {
					t.Errorf("%s: PrometheusRule: %v", where, err)
				}
				for _, g := range pr.Spec.Groups {
					for _, r := range g.Rules {
						if r.Alert == "" || r.Expr == "" || r.Annotations["runbook_url"] == "" {
							t.Errorf("%s: PrometheusRule: a rule without alert, expr or runbook_url: %+v", where, r)
						}
					}
				}
				kinds[head.Kind]++
				continue
			}
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s (%s %s): %v", where, head.APIVersion, head.Kind, err)
				continue
			}
			kinds[gvk.Kind]++
			if d, ok := obj.(*appsv1.Deployment); ok {
				checkDeployment(t, where, d)
			}
		}
	}
	if kinds["Deployment"] == 0 || kinds["Service"] == 0 {
		t.Errorf("expected at least a Deployment and a Service, decoded %v", kinds)
	}
	t.Logf("decoded strictly: %v", kinds)
}

// checkDeployment checks what the chart promises beyond well-formedness.
func checkDeployment(t *testing.T, where string, d *appsv1.Deployment) {
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: want one container", where)
	}
	c := spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.LivenessProbe == nil || c.LivenessProbe.GRPC == nil {
		t.Errorf("%s: native gRPC readiness and liveness probes expected", where)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("%s: read-only root filesystem expected", where)
	}
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("%s: runAsNonRoot expected", where)
	}
	var delay, grace int
	for _, a := range c.Args {
		fmt.Sscanf(a, "--shutdown-delay=%ds", &delay)
		fmt.Sscanf(a, "--shutdown-grace=%ds", &grace)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds <= int64(delay+grace) {
		t.Errorf("%s: terminationGracePeriodSeconds must exceed delay %d s + grace %d s", where, delay, grace)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: resources expected", where)
	}
}

// TestATypoFails makes sure the strict decoding is strict.
func TestATypoFails(t *testing.T) {
	doc := []byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  prots: []\n")
	if _, _, err := decoder(t).Decode(doc, nil, nil); err == nil {
		t.Fatal("a misspelt field decoded without error")
	}
}
