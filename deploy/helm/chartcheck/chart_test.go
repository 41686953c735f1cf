package chartcheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../strata"

// helmBinary finds helm on PATH or in $(go env GOPATH)/bin, or skips.
func helmBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("STRATA_REQUIRE_HELM") == "1" {
		t.Fatal("helm not found on PATH or in $(go env GOPATH)/bin, and STRATA_REQUIRE_HELM=1")
	}
	t.Skip("helm not found on PATH or in $(go env GOPATH)/bin: chart not checked " +
		"(install: go install helm.sh/helm/v3/cmd/helm@v3.22.0; make test does)")
	return ""
}

// valueSets are the values files the chart is rendered with: "" is the
// chart's defaults.
func valueSets(t *testing.T) []string {
	files, err := filepath.Glob("testdata/values-*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/values-*.yaml: %v", err)
	}
	return append([]string{""}, files...)
}

func helm(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

func TestChartLints(t *testing.T) {
	bin := helmBinary(t)
	for _, vf := range valueSets(t) {
		args := []string{"lint", "--strict", chartDir}
		if vf != "" {
			args = append(args, "-f", vf)
		}
		helm(t, bin, args...)
	}
}

// rendered is one object of `helm template`'s output.
type rendered struct {
	source string // the template it came from
	kind   string
	doc    []byte
	obj    any // the decoded typed object
}

func render(t *testing.T, bin, valuesFile string) []rendered {
	t.Helper()
	args := []string{"template", "rel", chartDir, "--namespace", "streams"}
	if valuesFile != "" {
		args = append(args, "-f", valuesFile)
	}
	out := helm(t, bin, args...)
	var objs []rendered
	for _, doc := range bytes.Split(out, []byte("\n---")) {
		source := ""
		for _, line := range strings.Split(string(doc), "\n") {
			if s, ok := strings.CutPrefix(line, "# Source: "); ok {
				source = s
			}
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		if head.Kind == "" {
			continue // only comments
		}
		obj, err := decodeStrict(head.APIVersion, head.Kind, doc)
		if err != nil {
			t.Errorf("%s (%s %s): %v", source, head.APIVersion, head.Kind, err)
			continue
		}
		objs = append(objs, rendered{source: source, kind: head.Kind, doc: doc, obj: obj})
	}
	return objs
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart writes (its Go types are not a dependency worth taking).
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port      string `json:"port"`
			Path      string `json:"path"`
			Interval  string `json:"interval"`
			Scheme    string `json:"scheme"`
			TLSConfig *struct {
				CA struct {
					Secret *corev1.SecretKeySelector `json:"secret"`
				} `json:"ca"`
			} `json:"tlsConfig"`
			BearerTokenSecret *corev1.SecretKeySelector `json:"bearerTokenSecret"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// decodeStrict decodes doc into the API type of apiVersion/kind; fields
// the type does not have are errors.
func decodeStrict(apiVersion, kind string, doc []byte) (any, error) {
	var obj any
	switch apiVersion + "/" + kind {
	case "v1/Service":
		obj = &corev1.Service{}
	case "v1/Secret":
		obj = &corev1.Secret{}
	case "v1/Pod":
		obj = &corev1.Pod{}
	case "apps/v1/StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "v1/ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "rbac.authorization.k8s.io/v1/Role":
		obj = &rbacv1.Role{}
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		obj = &rbacv1.RoleBinding{}
	case "batch/v1/Job":
		obj = &batchv1.Job{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		obj = &serviceMonitor{}
	default:
		return nil, fmt.Errorf("no API type known for %s %s: add it to decodeStrict", apiVersion, kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

func TestChartRendersValidObjects(t *testing.T) {
	bin := helmBinary(t)
	for _, vf := range valueSets(t) {
		name := vf
		if name == "" {
			name = "defaults"
		}
		t.Run(filepath.Base(name), func(t *testing.T) {
			objs := render(t, bin, vf)
			checkObjects(t, objs)
		})
	}
}

// checkObjects checks what the chart promises beyond the API types.
func checkObjects(t *testing.T, objs []rendered) {
	kinds := map[string]int{}
	var podLabels []map[string]string
	var pdbs []*policyv1.PodDisruptionBudget
	for _, o := range objs {
		kinds[o.kind]++
		var spec *corev1.PodTemplateSpec
		switch v := o.obj.(type) {
		case *appsv1.StatefulSet:
			spec = &v.Spec.Template
			if len(v.Spec.VolumeClaimTemplates) == 0 {
				t.Errorf("%s: StatefulSet %s has no volumeClaimTemplates", o.source, v.Name)
			}
			if v.Spec.ServiceName == "" {
				t.Errorf("%s: StatefulSet %s has no serviceName", o.source, v.Name)
			}
			checkSelector(t, o.source, v.Spec.Selector, spec.Labels)
		case *appsv1.Deployment:
			spec = &v.Spec.Template
			checkSelector(t, o.source, v.Spec.Selector, spec.Labels)
			checkKafka(t, o.source, spec, objs)
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, v)
		case *corev1.Pod:
			if v.Annotations["helm.sh/hook"] != "test" {
				t.Errorf("%s: a bare Pod that is not a helm test hook", o.source)
			}
		case *batchv1.Job:
			if sc := v.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("%s: Job %s does not run as non-root", o.source, v.Name)
			}
			if !strings.Contains(v.Annotations["helm.sh/hook"], "pre-install") {
				t.Errorf("%s: Job %s is not a pre-install hook", o.source, v.Name)
			}
		}
		if spec == nil {
			continue
		}
		podLabels = append(podLabels, spec.Labels)
		if spec.Spec.SecurityContext == nil || spec.Spec.SecurityContext.RunAsNonRoot == nil || !*spec.Spec.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pods do not run as non-root", o.source)
		}
		for _, c := range spec.Spec.Containers {
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("%s: container %s: no readiness probe on /readyz", o.source, c.Name)
			}
			if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/livez" {
				t.Errorf("%s: container %s: no liveness probe on /livez", o.source, c.Name)
			}
			if c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: container %s: no memory request", o.source, c.Name)
			}
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "admin" }) {
				t.Errorf("%s: container %s: no port named admin (probes and scrapes use it)", o.source, c.Name)
			}
		}
	}
	if kinds["StatefulSet"] != 2 || kinds["Deployment"] != 1 {
		t.Errorf("want 2 StatefulSets (metad, bookie) and 1 Deployment (broker), got %v", kinds)
	}
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Errorf("PDB %s: %v", pdb.Name, err)
			continue
		}
		n := 0
		for _, l := range podLabels {
			if sel.Matches(labelSet(l)) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("PDB %s selects the pods of %d workloads, want 1", pdb.Name, n)
		}
	}
}

func checkSelector(t *testing.T, source string, sel *metav1.LabelSelector, labels map[string]string) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || !s.Matches(labelSet(labels)) {
		t.Errorf("%s: selector %v does not match the pod template's labels %v (%v)", source, sel, labels, err)
	}
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool              { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string            { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) { v, ok := l[k]; return v, ok }

// checkKafka checks a broker pod's Kafka listener when it has one (a
// container port named kafka): it listens on that port, advertises the
// pod's IP with it (Kafka clients dial what Metadata names, so it must be
// an address they reach, not the Service's), and the Service exposes it.
func checkKafka(t *testing.T, source string, spec *corev1.PodTemplateSpec, objs []rendered) {
	t.Helper()
	for _, c := range spec.Spec.Containers {
		i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "kafka" })
		if i < 0 {
			continue
		}
		port := c.Ports[i].ContainerPort
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if want := fmt.Sprintf("0.0.0.0:%d", port); env["STRATA_KAFKA_LISTEN"] != want {
			t.Errorf("%s: STRATA_KAFKA_LISTEN %q, want %q", source, env["STRATA_KAFKA_LISTEN"], want)
		}
		if want := fmt.Sprintf("$(POD_IP):%d", port); env["STRATA_KAFKA_ADVERTISED"] != want {
			t.Errorf("%s: STRATA_KAFKA_ADVERTISED %q, want %q", source, env["STRATA_KAFKA_ADVERTISED"], want)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_IP" && e.ValueFrom != nil }) {
			t.Errorf("%s: no POD_IP for STRATA_KAFKA_ADVERTISED", source)
		}
		exposed := false
		for _, o := range objs {
			if svc, ok := o.obj.(*corev1.Service); ok && svc.Spec.Selector["app.kubernetes.io/component"] == spec.Labels["app.kubernetes.io/component"] {
				exposed = exposed || slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
					return p.Name == "kafka" && p.Port == port && p.TargetPort.StrVal == "kafka"
				})
			}
		}
		if !exposed {
			t.Errorf("%s: no Service exposes the Kafka port %d", source, port)
		}
	}
}
